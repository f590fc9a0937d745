package detector

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/policy"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestKubernetesNames checks that the names the node tells (namespace, pod,
// container, process) and the ids beside them select series in rule
// matchers, render in templates, label rule alerts, and reach Rego.
func TestKubernetesNames(t *testing.T) {
	const (
		uid = "0d1c2b3a-4f5e-6d7c-8b9a-a1b2c3d4e5f6"
		id  = "3f4b8c2a9d1e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a"
	)
	shop := snapshot.Series{Span: "checkout", CgroupID: 7, Identity: snapshot.Identity{ContainerID: id, PodUID: uid, Namespace: "shop", Pod: "checkout-7d9f8b6c5-x2x9z", Container: "server", Process: "checkoutd"}, Count: 10, P99Ns: uint64(time.Second)}
	other := shop
	other.CgroupID, other.Namespace, other.Pod, other.Process = 8, "staging", "checkout-0", "checkoutd"
	sidecar := shop
	sidecar.CgroupID, sidecar.Container, sidecar.Process = 9, "istio-proxy", "envoy"

	dir := t.TempDir()
	rego := filepath.Join(dir, "names.rego")
	if err := os.WriteFile(rego, []byte(`package spanwatch
import rego.v1
alerts contains {"labels": object.union(s.labels, {"alertname": "ByNames"})} if {
	some s in input.series
	s.namespace == "shop"
	s.pod_uid == "`+uid+`"
	s.labels.container == "istio-proxy"
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Parse(filepath.Join(dir, "rules.yaml"), []byte(`
rules:
  - name: ShopSlow
    namespace: shop
    pod: "checkout-*"
    container: "!istio-proxy"
    process: checkoutd
    pod_uid: "`+uid+`"
    container_id: "3f4b*"
    when: p99 > 200ms
    annotations: {summary: "{{ .Labels.process }} in {{ .Labels.namespace }}/{{ .Labels.pod }}/{{ .Labels.container }}"}
policies:
  - file: names.rego
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := New(Config{ExternalLabels: map[string]string{}})
	d.SetRules(cfg)
	changed, err := d.Evaluate(context.Background(), snap(0, shop, other, sidecar))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string][]map[string]string{}
	for _, a := range changed {
		byName[a.Labels["alertname"]] = append(byName[a.Labels["alertname"]], a.Labels)
		if a.Labels["alertname"] == "ShopSlow" {
			if got, want := a.Annotations["summary"], "checkoutd in shop/checkout-7d9f8b6c5-x2x9z/server"; got != want {
				t.Errorf("summary = %q, want %q", got, want)
			}
		}
	}
	if n := len(byName["ShopSlow"]); n != 1 {
		t.Fatalf("ShopSlow fired for %d series, want 1 (only shop's server container): %v", n, byName["ShopSlow"])
	}
	want := map[string]string{"alertname": "ShopSlow", "span": "checkout", "cgroup_id": "7", "container_id": id, "pod_uid": uid,
		"namespace": "shop", "pod": "checkout-7d9f8b6c5-x2x9z", "container": "server", "process": "checkoutd"}
	if got := byName["ShopSlow"][0]; !maps.Equal(got, want) {
		t.Errorf("ShopSlow labels\n got  %v\n want %v", sorted(got), sorted(want))
	}
	if got := byName["ByNames"]; len(got) != 1 || got[0]["process"] != "envoy" || got[0]["container"] != "istio-proxy" {
		t.Errorf("Rego alert labels = %v, want one with process envoy, container istio-proxy", got)
	}
}

func sorted(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// TestServiceNames checks that the OpenTelemetry service a series'
// processes declare selects it in a rule (service:), renders in a
// template, labels the alert, and reaches Rego as series.service; a
// series without one is not selected.
func TestServiceNames(t *testing.T) {
	pay := snapshot.Series{Span: "charge", CgroupID: 7, Identity: snapshot.Identity{Process: "server", Service: "payments"}, Count: 10, P99Ns: uint64(time.Second)}
	plain := pay
	plain.CgroupID, plain.Service = 8, ""
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "svc.rego"), []byte(`package spanwatch
import rego.v1
alerts contains {"labels": {"alertname": "ByService", "service": s.service}} if {
	some s in input.series
	s.service == "payments"
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Parse(filepath.Join(dir, "rules.yaml"), []byte(`
rules:
  - name: PaySlow
    service: "pay*"
    when: p99 > 200ms
    annotations: {summary: "{{ .Labels.service }} ({{ .Labels.process }})"}
policies:
  - file: svc.rego
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := New(Config{ExternalLabels: map[string]string{}})
	d.SetRules(cfg)
	changed, err := d.Evaluate(context.Background(), snap(0, pay, plain))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range changed {
		got = append(got, a.Labels["alertname"]+" "+a.Labels["service"]+" "+a.Labels["cgroup_id"]+" "+a.Annotations["summary"])
	}
	sort.Strings(got)
	want := []string{"ByService payments  ", "PaySlow payments 7 payments (server)"}
	if !slices.Equal(got, want) {
		t.Errorf("alerts %q, want %q", got, want)
	}
}
