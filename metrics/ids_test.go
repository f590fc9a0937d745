package metrics

import (
	"fmt"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

// TestIDsOptIn restarts a Kubernetes container between two snapshots (a
// new container id, so a new cgroup path, same namespace, pod and
// container names) beside a systemd service. By default the container's
// spans go on in one series (cumulative across the restart, no cgroup
// path, no ids) while the service, which has no pod, keeps its cgroup
// path; with ids: true each container is its own series with its
// cgroup path, container_id and pod_uid.
func TestIDsOptIn(t *testing.T) {
	pod := func(container string) snapshot.Series {
		cg := "/kubepods.slice/kubepods-pod1234.slice/cri-containerd-" + container + ".scope"
		sr := window("checkout", cg, []uint64{1e6, 2e6, 3e6}, 0, 0)
		sr.Namespace, sr.Pod, sr.Container, sr.PodUID, sr.ContainerID = "shop", "checkout-7d9f", "app", "1234", container
		return sr
	}
	unit := window("checkout", "/system.slice/legacy.service", []uint64{1e6}, 0, 0)
	unit.Unit = "legacy.service"
	for _, ids := range []bool{false, true} {
		e, err := NewExporter(Config{IDs: ids})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		e.Observe(&snapshot.Snapshot{Version: snapshot.Version, Time: now, WindowNs: 10e9, Series: []snapshot.Series{pod("aaaa"), unit}})
		e.Observe(&snapshot.Snapshot{Version: snapshot.Version, Time: now.Add(10 * time.Second), WindowNs: 10e9, Series: []snapshot.Series{pod("bbbb"), unit}})
		f := scrape(t, e.Handler())["spanwatch_spans_total"]
		if f == nil {
			t.Fatalf("ids %v: no spanwatch_spans_total", ids)
		}
		got := map[string]float64{}
		for _, m := range f.Metric {
			l := labelsOf(m)
			got[fmt.Sprintf("pod=%s cgroup=%s container_id=%s pod_uid=%s", l["pod"], l["cgroup"], l["container_id"], l["pod_uid"])] = m.GetCounter().GetValue()
		}
		want := map[string]float64{
			"pod=checkout-7d9f cgroup= container_id= pod_uid=":                6,
			"pod= cgroup=/system.slice/legacy.service container_id= pod_uid=": 2,
		}
		if ids {
			want = map[string]float64{
				"pod=checkout-7d9f cgroup=/kubepods.slice/kubepods-pod1234.slice/cri-containerd-aaaa.scope container_id=aaaa pod_uid=1234": 3,
				"pod=checkout-7d9f cgroup=/kubepods.slice/kubepods-pod1234.slice/cri-containerd-bbbb.scope container_id=bbbb pod_uid=1234": 3,
				"pod= cgroup=/system.slice/legacy.service container_id= pod_uid=":                                                          2,
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("ids %v: series\n%v\nwant\n%v", ids, got, want)
		}
	}
}
