package notify

import (
	"time"

	"github.com/spanwatch/spanwatch/alert"
)

// SampleAlert returns a firing overrun alert like the ones the detector
// sends, with the annotations it writes (a symbolized stack, a trace id),
// for `spanwatch notify test` and for checking templates.
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
			"duration":    "412ms",
			"budget":      "250ms",
			"pid":         "4242",
			"tid":         "4243",
			"trace_id":    "4bf92f3577b34da6a3ce929d0e0e4736",
			"span_id":     "00f067aa0ba902b7",
			"stack": "database/sql.(*DB).QueryContext (/usr/lib/go/src/database/sql/sql.go:1776)\n" +
				"main.loadCart (/src/shop/cart.go:88)\n" +
				"main.checkout (/src/shop/checkout.go:41)",
		},
		State:        alert.StateFiring,
		StartsAt:     now,
		GeneratorURL: "http://localhost/spanwatch",
		Fingerprint:  alert.Fingerprint(labels),
		Value:        "412ms",
	}
}
