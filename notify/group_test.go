package notify

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/alert"
)

func alertNames(m *Message) []string {
	var out []string
	for _, a := range m.Alerts {
		out = append(out, a.Annotations["summary"]+"/"+a.Status)
	}
	sort.Strings(out)
	return out
}

// TestGroupTiming follows one group through group_wait, group_interval,
// repeat_interval and resolution, as Alertmanager would.
func TestGroupTiming(t *testing.T) {
	rc := newReceiver(t, nil).start()
	c := webhookConfig(t, rc.srv.URL, t.TempDir(), `
group_wait: 300ms
group_interval: 400ms
repeat_interval: 1200ms
send_resolved: true`)
	c.Routing.ExternalURL = "http://spanwatch.example"
	d := mustNew(t, c)
	t0 := time.Now()
	notifyOK(t, d, mkAlert("a", 1, alert.StateFiring, t0))
	time.Sleep(100 * time.Millisecond)
	notifyOK(t, d, mkAlert("a", 2, alert.StateFiring, t0))

	// group_wait: both alerts arrive together, not before it.
	waitFor(t, 3*time.Second, "first notification", func() bool { return len(rc.messages()) >= 1 })
	m := rc.messages()[0]
	if got := fmt.Sprint(alertNames(m)); got != "[a 1/firing a 2/firing]" {
		t.Errorf("first notification has %s, want both alerts (group_wait batches them)", got)
	}
	if dt := rc.times()[0].Sub(t0); dt < 280*time.Millisecond {
		t.Errorf("first notification after %s, before group_wait (300ms)", dt)
	}
	want := Message{Version: "4", Receiver: "test", Status: "firing", GroupKey: `test:{alertname="Slowa"}`, ExternalURL: "http://spanwatch.example"}
	if m.Version != want.Version || m.Receiver != want.Receiver || m.Status != want.Status || m.GroupKey != want.GroupKey || m.ExternalURL != want.ExternalURL {
		t.Errorf("header fields %+v, want %+v", *m, want)
	}
	if fmt.Sprint(m.GroupLabels) != "map[alertname:Slowa]" || fmt.Sprint(m.CommonLabels) != "map[alertname:Slowa span:a]" {
		t.Errorf("groupLabels %v commonLabels %v", m.GroupLabels, m.CommonLabels)
	}
	first := rc.times()[0]

	// A new alert after the first notification waits for group_interval;
	// the notification carries every alert of the group.
	notifyOK(t, d, mkAlert("a", 3, alert.StateFiring, time.Now()))
	waitFor(t, 3*time.Second, "second notification", func() bool { return len(rc.messages()) >= 2 })
	if got := fmt.Sprint(alertNames(rc.messages()[1])); got != "[a 1/firing a 2/firing a 3/firing]" {
		t.Errorf("second notification has %s", got)
	}
	if dt := rc.times()[1].Sub(first); dt < 380*time.Millisecond {
		t.Errorf("second notification %s after the first, before group_interval (400ms)", dt)
	}
	second := rc.times()[1]

	// Nothing changes: the next notification is the repeat.
	waitFor(t, 4*time.Second, "repeat notification", func() bool { return len(rc.messages()) >= 3 })
	if dt := rc.times()[2].Sub(second); dt < 1150*time.Millisecond {
		t.Errorf("repeat %s after the last notification, before repeat_interval (1.2s)", dt)
	}

	// One alert resolves: sent with send_resolved.
	notifyOK(t, d, mkAlert("a", 1, alert.StateResolved, t0))
	waitFor(t, 3*time.Second, "resolved notification", func() bool { return len(rc.messages()) >= 4 })
	if got := fmt.Sprint(alertNames(rc.messages()[3])); got != "[a 1/resolved a 2/firing a 3/firing]" {
		t.Errorf("notification after one resolved has %s", got)
	}
	// The rest resolve: the group says so once, then is gone.
	notifyOK(t, d, mkAlert("a", 2, alert.StateResolved, t0), mkAlert("a", 3, alert.StateResolved, t0))
	waitFor(t, 3*time.Second, "all-resolved notification", func() bool { return len(rc.messages()) >= 5 })
	m = rc.messages()[4]
	if got := fmt.Sprint(alertNames(m)); got != "[a 2/resolved a 3/resolved]" || m.Status != "resolved" {
		t.Errorf("last notification has %s status %s, want a 2 and a 3 resolved", got, m.Status)
	}
	waitFor(t, time.Second, "group removal", func() bool { return d.Stats().Webhooks[0].PendingAlerts == 0 })
	time.Sleep(500 * time.Millisecond)
	if n := len(rc.messages()); n != 5 {
		t.Errorf("%d notifications after the group resolved, want 5", n)
	}
	if s := d.Stats().Outbox; s.Entries != 0 {
		t.Errorf("outbox holds %d entries after everything was delivered and resolved", s.Entries)
	}
}

// TestGroupingOptions checks group_by, send_resolved: false, max_alerts
// and the immediate flush of alerts that started long ago.
func TestGroupingOptions(t *testing.T) {
	// Start times in the table are relative to tableNow; each subtest
	// shifts them to when it sends, since an alert that started more than
	// group_wait ago skips group_wait.
	tableNow := time.Now()
	tests := []struct {
		name  string
		extra string
		send  [][]*alert.Alert // Notify calls, 150ms apart
		want  []string         // each notification's alerts, in order received (sorted within)
	}{
		{
			name:  "group by all labels",
			extra: `group_by: ["..."]`,
			send:  [][]*alert.Alert{{mkAlert("a", 1, alert.StateFiring, time.Now()), mkAlert("a", 2, alert.StateFiring, time.Now())}},
			want:  []string{"[a 1/firing]", "[a 2/firing]"},
		},
		{
			name:  "group by span",
			extra: "group_by: [span]",
			send:  [][]*alert.Alert{{mkAlert("a", 1, alert.StateFiring, time.Now()), mkAlert("b", 1, alert.StateFiring, time.Now()), mkAlert("a", 2, alert.StateFiring, time.Now())}},
			want:  []string{"[a 1/firing a 2/firing]", "[b 1/firing]"},
		},
		{
			name:  "send_resolved false",
			extra: "send_resolved: false",
			send: [][]*alert.Alert{
				{mkAlert("a", 1, alert.StateFiring, time.Now()), mkAlert("a", 2, alert.StateFiring, time.Now())},
				{mkAlert("a", 1, alert.StateResolved, time.Now())},
				{mkAlert("a", 2, alert.StateResolved, time.Now())},
			},
			want: []string{"[a 1/firing a 2/firing]"},
		},
		{
			name:  "max_alerts truncates",
			extra: "max_alerts: 2",
			send:  [][]*alert.Alert{{mkAlert("a", 1, alert.StateFiring, time.Now()), mkAlert("a", 2, alert.StateFiring, time.Now()), mkAlert("a", 3, alert.StateFiring, time.Now())}},
			want:  []string{"[a 1/firing a 2/firing] truncated 1"},
		},
		{
			name:  "pending and inactive ignored",
			extra: "",
			send:  [][]*alert.Alert{{mkAlert("a", 1, alert.StatePending, time.Now()), mkAlert("a", 2, alert.StateInactive, time.Now()), mkAlert("a", 3, alert.StateFiring, time.Now())}},
			want:  []string{"[a 3/firing]"},
		},
		{
			name:  "resolved before anyone heard",
			extra: "group_wait: 400ms",
			send: [][]*alert.Alert{
				{mkAlert("a", 1, alert.StateFiring, time.Now())},
				{mkAlert("a", 1, alert.StateResolved, time.Now()), mkAlert("b", 1, alert.StateResolved, time.Now())},
			},
			want: nil,
		},
		{
			name:  "old alert skips group_wait",
			extra: "group_wait: 1h",
			send:  [][]*alert.Alert{{mkAlert("a", 1, alert.StateFiring, time.Now().Add(-2*time.Hour))}},
			want:  []string{"[a 1/firing]"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := newReceiver(t, nil).start()
			d := mustNew(t, webhookConfig(t, rc.srv.URL, t.TempDir(), tt.extra))
			for i, batch := range tt.send {
				if i > 0 {
					time.Sleep(150 * time.Millisecond)
				}
				var shifted []*alert.Alert
				for _, a := range batch {
					c := *a
					c.StartsAt = time.Now().Add(a.StartsAt.Sub(tableNow))
					shifted = append(shifted, &c)
				}
				notifyOK(t, d, shifted...)
			}
			waitFor(t, 3*time.Second, "notifications", func() bool { return len(rc.messages()) >= len(tt.want) })
			time.Sleep(300 * time.Millisecond) // would anything else arrive?
			var got []string
			for _, m := range rc.messages() {
				s := fmt.Sprint(alertNames(m))
				if m.TruncatedAlerts > 0 {
					s += fmt.Sprintf(" truncated %d", m.TruncatedAlerts)
				}
				got = append(got, s)
			}
			sort.Strings(got)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("notifications %q, want %q", got, tt.want)
			}
			if tt.name == "send_resolved false" || tt.name == "resolved before anyone heard" {
				waitFor(t, 2*time.Second, "resolved alerts to leave their groups", func() bool { return d.Stats().Webhooks[0].PendingAlerts == 0 })
				if n := len(rc.messages()); n != len(tt.want) {
					t.Errorf("%d notifications once the groups flushed, want %d", n, len(tt.want))
				}
			}
		})
	}
}

// TestEndsAtResolves sends an alert that lasts a fixed time, as overrun
// alerts do: once its endsAt passes it is reported resolved and leaves its
// group, without a resolved alert from the caller.
func TestEndsAtResolves(t *testing.T) {
	rc := newReceiver(t, nil).start()
	d := mustNew(t, webhookConfig(t, rc.srv.URL, t.TempDir(), ""))
	a := mkAlert("a", 1, alert.StateFiring, time.Now())
	a.EndsAt = time.Now().Add(300 * time.Millisecond)
	notifyOK(t, d, a)
	waitFor(t, 3*time.Second, "the resolution", func() bool { return len(rc.messages()) == 2 })
	msgs := rc.messages()
	if msgs[0].Status != "firing" || msgs[1].Status != "resolved" || !msgs[1].Alerts[0].EndsAt.Equal(a.EndsAt) {
		t.Errorf("notifications %s then %s (endsAt %s), want firing then resolved at %s", msgs[0].Status, msgs[1].Status, msgs[1].Alerts[0].EndsAt, a.EndsAt)
	}
	waitFor(t, time.Second, "the group to go", func() bool { return d.Stats().Webhooks[0].PendingAlerts == 0 })
	// The last notification leaves the outbox once its 200 is recorded.
	waitFor(t, time.Second, "an empty outbox", func() bool { return d.Stats().Outbox.Entries == 0 })
}

// TestSameAlertTwiceInOneCall gives Notify an alert firing, then
// resolved, in one call (what the detector sends for an alert a restart
// restored that resolves before it was sent again): the receiver hears
// the episode, firing then resolved. Written as one, the resolved state
// would replace the firing one before its group's first notification,
// and the group would send nothing: resolved before anyone heard it fire.
func TestSameAlertTwiceInOneCall(t *testing.T) {
	rc := newReceiver(t, nil).start()
	d := mustNew(t, webhookConfig(t, rc.srv.URL, t.TempDir(), ""))
	start := time.Now().Add(-time.Second)
	notifyOK(t, d, mkAlert("a", 1, alert.StateFiring, start), mkAlert("a", 1, alert.StateResolved, start))
	waitFor(t, 3*time.Second, "two notifications", func() bool { return len(rc.messages()) >= 2 })
	time.Sleep(200 * time.Millisecond) // would anything else arrive?
	var got []string
	for _, m := range rc.messages() {
		got = append(got, fmt.Sprint(alertNames(m)))
	}
	if want := []string{"[a 1/firing]", "[a 1/resolved]"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("notifications %q, want %q", got, want)
	}
	waitFor(t, time.Second, "an empty outbox", func() bool { return d.Stats().Outbox.Entries == 0 })
}
