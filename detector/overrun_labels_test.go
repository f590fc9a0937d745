package detector

import (
	"context"
	"fmt"
	"testing"
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
