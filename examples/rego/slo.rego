# Latency and error SLOs per span, with thresholds kept in slo.json, plus
# two checks a YAML rule cannot express: a burst of overruns across all
# spans of one container, and a collector that is losing data.
package spanwatch

# slo(span) is the span's SLO object from data, or the default one.
slo(span) := s if {
	s := data.slo.spans[span]
} else := data.slo.default

# A span's p99 is over its SLO (with enough traffic to mean something).
alerts contains {
	"labels": object.union(s.labels, {
		"alertname": "LatencySLO",
		"severity": slo(s.span).severity,
	}),
	"annotations": {"summary": sprintf("%s p99 is %vms, SLO %vms", [s.span, s.p99_ns / 1000000, slo(s.span).p99_ms])},
} if {
	some s in input.series
	s.count >= data.slo.min_count
	s.p99_ns > slo(s.span).p99_ms * 1000000
}

# A span's error ratio is over its SLO.
alerts contains {
	"labels": object.union(s.labels, {
		"alertname": "ErrorSLO",
		"severity": slo(s.span).severity,
	}),
	"annotations": {"summary": sprintf("%s error ratio is %v%%, SLO %v%%", [s.span, round(s.error_ratio * 1000) / 10, slo(s.span).error_pct])},
} if {
	some s in input.series
	s.count >= data.slo.min_count
	s.error_ratio * 100 > slo(s.span).error_pct
}

# Many overruns from one container in one window, whatever the span.
overruns_by_container[c] := n if {
	some o in input.overruns
	c := o.container
	c != ""
	n := count([x | some x in input.overruns; x.container == c])
}

alerts contains {
	"labels": {"alertname": "OverrunStorm", "container": c, "severity": "page"},
	"annotations": {"summary": sprintf("%d spans over budget in %s within %vs", [n, c, input.window_seconds])},
} if {
	some c, n in overruns_by_container
	n >= data.slo.overrun_storm
}

# The collector lost overrun records: stacks are missing from alerts.
alerts contains {
	"labels": {"alertname": "CollectorDropping", "host": input.host, "severity": "ticket"},
	"annotations": {"summary": sprintf("%d overrun records dropped (ring buffer full)", [input.stats.ringbuf_drops])},
} if {
	input.stats.ringbuf_drops > 0
}
