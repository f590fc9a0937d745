package notify

import (
	"time"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/snapshot"
)

// SampleAlert returns a firing overrun alert like the ones the detector
// sends, with a symbolized stack and a trace id, for `spanwatch notify test`
// and for checking templates.
func SampleAlert(now time.Time) *alert.Alert {
	labels := map[string]string{
		"alertname": "SpanwatchTest",
		"span":      "checkout",
		"severity":  "info",
		"source":    "spanwatch-notify-test",
	}
	return &alert.Alert{
		Labels: labels,
		Annotations: map[string]string{
			"summary":     "test alert from spanwatch notify test",
			"description": "checkout took 412ms, over its 250ms budget; this alert is a test and needs no action",
		},
		State:        alert.StateFiring,
		StartsAt:     now,
		GeneratorURL: "http://localhost/spanwatch",
		Fingerprint:  alert.Fingerprint(labels),
		Value:        "412ms",
		Overrun: &snapshot.Overrun{
			Time:       now,
			Span:       "checkout",
			PID:        4242,
			TID:        4243,
			Comm:       "shop",
			DurationNs: uint64(412 * time.Millisecond),
			BudgetNs:   uint64(250 * time.Millisecond),
			TraceID:    "4bf92f3577b34da6a3ce929d0e0e4736",
			SpanID:     "00f067aa0ba902b7",
			Source:     "user_events",
			UserStack: []snapshot.Frame{
				{Addr: 0x4a1f20, Function: "database/sql.(*DB).QueryContext", File: "/usr/lib/go/src/database/sql/sql.go", Line: 1776},
				{Addr: 0x6b2c10, Function: "main.loadCart", File: "/src/shop/cart.go", Line: 88},
				{Addr: 0x6b3a44, Function: "main.checkout", File: "/src/shop/checkout.go", Line: 41},
			},
		},
	}
}
