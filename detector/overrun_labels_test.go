package detector

import (
	"context"
	"fmt"
	"testing"

	"github.com/spanwatch/spanwatch/snapshot"
)

// TestOverrunAlertSourceLabels checks that an overrun of a source with
// labels (a USDT source's labels:) carries them on its alert, and that
// two label values are two alerts.
func TestOverrunAlertSourceLabels(t *testing.T) {
	rec := &recorder{}
	// No external labels: the test is about the source's.
	d := New(Config{Notifier: rec, ExternalLabels: map[string]string{}})
	d.SetRules(mustParse(t, "budgets:\n  - {span: checkout, budget: 250ms}\n"))
	var fps []string
	for _, status := range []string{"503", "200"} {
		o := overrun(0, "checkout", "api")
		o.SourceLabels = map[string]string{"status": status}
		a, err := d.Overrun(context.Background(), o)
		if err != nil || a == nil {
			t.Fatalf("Overrun = %v, %v", a, err)
		}
		want := map[string]string{"alertname": "SpanOverBudget", "span": "checkout", "process": "api", "container": "web-1", "status": status}
		if fmt.Sprint(a.Labels) != fmt.Sprint(want) {
			t.Errorf("labels = %v, want %v", a.Labels, want)
		}
		fps = append(fps, a.Fingerprint)
	}
	if fps[0] == fps[1] {
		t.Error("two label values gave one alert")
	}
}

// TestOverrunAlertIdentity checks that an overrun's alert carries the same
// identity labels as its series (snapshot.Identity.AddLabels), with the
// thread's command as process where the record has one, and the cgroup's
// executable where it has none.
func TestOverrunAlertIdentity(t *testing.T) {
	d := New(Config{ExternalLabels: map[string]string{}})
	d.SetRules(mustParse(t, "budgets:\n  - {span: checkout, budget: 250ms}\n"))
	id := snapshot.Identity{Cgroup: "/kubepods/pod1/c1", ContainerID: "c1", PodUID: "p-1", Unit: "u.service",
		Namespace: "shop", Pod: "web-0", Container: "web", Process: "server"}
	for _, comm := range []string{"worker-3", ""} {
		o := overrun(0, "checkout", comm)
		o.Identity = id
		a, err := d.Overrun(context.Background(), o)
		if err != nil || a == nil {
			t.Fatalf("Overrun = %v, %v", a, err)
		}
		want := (&snapshot.Series{Span: "checkout", Identity: id}).Labels()
		want["alertname"] = "SpanOverBudget"
		if comm != "" {
			want["process"] = comm
		}
		if fmt.Sprint(a.Labels) != fmt.Sprint(want) {
			t.Errorf("comm %q: labels = %v, want %v", comm, a.Labels, want)
		}
	}
}
