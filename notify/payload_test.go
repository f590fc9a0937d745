package notify

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/alert"
)

// TestOverrunAnnotations checks that an overrun alert's annotations are
// delivered as the detector wrote them (detector.Overrun writes them once
// for every notifier): nothing is added from the series it names, nothing
// the alert carries is changed, and an alert without annotations gets an
// empty object.
func TestOverrunAnnotations(t *testing.T) {
	a := SampleAlert(time.Unix(1700000000, 0))
	a.Annotations["trace_id"] = "set-by-rule"
	a.Series = &alert.SeriesRef{Span: "checkout", CgroupID: 7}
	want := maps.Clone(a.Annotations)
	w := &Webhook{Name: "test"}
	m := buildMessage(w, "", "k", map[string]string{}, []*alert.Alert{a})
	if got := m.Alerts[0].Annotations; !maps.Equal(got, want) {
		t.Errorf("annotations\n got %q\nwant %q", got, want)
	}
	if !maps.Equal(a.Annotations, want) {
		t.Errorf("the message changed the alert's annotations: %q", a.Annotations)
	}
	body, err := render(&Webhook{Format: FormatAlertmanagerAPI}, nil, m, []*alert.Alert{a}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var posted []PostableAlert
	if err := json.Unmarshal(body, &posted); err != nil || len(posted) != 1 || !maps.Equal(posted[0].Annotations, want) {
		t.Errorf("Alertmanager API body %s (%v)", body, err)
	}

	bare := &alert.Alert{Labels: map[string]string{"alertname": "x"}}
	if b, _ := json.Marshal(buildMessage(w, "", "k", map[string]string{}, []*alert.Alert{bare}).Alerts[0]); !strings.Contains(string(b), `"annotations":{}`) {
		t.Errorf("an alert without annotations: %s", b)
	}
}

// TestTemplateFormat delivers through a user template and checks the body.
func TestTemplateFormat(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	var ctype string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		ctype = r.Header.Get("Content-Type")
		mu.Unlock()
	}))
	defer srv.Close()
	tmpl := `{"text": {{ json (printf "[%s] %s" (upper .Status) .CommonAnnotations.summary) }}, "firing": {{ len .Firing }}, "resolved": {{ len .Resolved }}, "stack": {{ json (index .Alerts 0).Annotations.stack }}, "trace": "{{ (index .Alerts 0).Annotations.trace_id }}"}`
	c := webhookConfig(t, srv.URL, t.TempDir(), "format: template\ncontent_type: text/plain\ntemplate: '"+tmpl+"'")
	d := mustNew(t, c)
	notifyOK(t, d, SampleAlert(time.Now()))
	waitFor(t, 5*time.Second, "delivery", func() bool { mu.Lock(); defer mu.Unlock(); return len(bodies) == 1 })
	var got struct {
		Text     string
		Firing   int
		Resolved int
		Stack    string
		Trace    string
	}
	if err := json.Unmarshal([]byte(bodies[0]), &got); err != nil {
		t.Fatalf("template output is not JSON: %v\n%s", err, bodies[0])
	}
	if got.Text != "[FIRING] test alert from spanwatch notify test" || got.Firing != 1 || got.Resolved != 0 ||
		!strings.HasPrefix(got.Stack, "database/sql.(*DB).QueryContext") || got.Trace != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("template output %+v", got)
	}
	if ctype != "text/plain" {
		t.Errorf("content type %q", ctype)
	}
}

func TestAPIBody(t *testing.T) {
	now := time.Unix(1700000100, 0).UTC()
	firing := mkAlert("a", 1, alert.StateFiring, now.Add(-time.Minute))
	firing.EndsAt = now.Add(time.Hour) // sent: Alertmanager resolves it then
	resolved := mkAlert("a", 2, alert.StateResolved, now.Add(-time.Minute))
	resolved.EndsAt = time.Time{} // filled with the flush time
	w := &Webhook{Name: "am", Format: FormatAlertmanagerAPI}
	b, err := render(w, nil, nil, []*alert.Alert{firing, resolved}, now)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"labels":{"alertname":"Slowa","instance":"1","span":"a"},"annotations":{"summary":"a 1"},"startsAt":"2023-11-14T22:14:00Z","endsAt":"2023-11-14T23:15:00Z"},` +
		`{"labels":{"alertname":"Slowa","instance":"2","span":"a"},"annotations":{"summary":"a 2"},"startsAt":"2023-11-14T22:14:00Z","endsAt":"2023-11-14T22:15:00Z"}]`
	if string(b) != want {
		t.Errorf("body\n got %s\nwant %s", b, want)
	}
}
