package usdt

import (
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/internal/usdt"
)

func TestSilentHint(t *testing.T) {
	for _, c := range []struct {
		src  usdt.SpanSource
		want string // a part of the hint; "" for none
	}{
		{usdt.SpanSource{Start: usdt.ProbeRef{Provider: "hotspot", Name: "method__entry"}, End: usdt.ProbeRef{Provider: "hotspot", Name: "method__return"}}, "-XX:+ExtendedDTraceProbes"},
		{usdt.SpanSource{Probe: usdt.ProbeRef{Provider: "hotspot", Name: "object__alloc"}}, "DTraceAllocProbes"},
		{usdt.SpanSource{Start: usdt.ProbeRef{Provider: "hotspot", Name: "monitor__wait"}, End: usdt.ProbeRef{Provider: "hotspot", Name: "monitor__waited"}}, "DTraceMonitorProbes"},
		{usdt.SpanSource{Start: usdt.ProbeRef{Provider: "ruby", Name: "cmethod__entry"}, End: usdt.ProbeRef{Provider: "ruby", Name: "cmethod__return"}}, ":c_call"},
		{usdt.SpanSource{Start: usdt.ProbeRef{Provider: "ruby", Name: "method__entry"}, End: usdt.ProbeRef{Provider: "ruby", Name: "method__return"}}, ":call/:return"},
		{usdt.SpanSource{Probe: usdt.ProbeRef{Provider: "php", Name: "request__shutdown"}}, "USE_ZEND_DTRACE=1"},
		// Probes that fire unasked: no hint.
		{usdt.SpanSource{Start: usdt.ProbeRef{Provider: "hotspot", Name: "gc__begin"}, End: usdt.ProbeRef{Provider: "hotspot", Name: "gc__end"}}, ""},
		{usdt.SpanSource{Start: usdt.ProbeRef{Provider: "postgresql", Name: "query__start"}, End: usdt.ProbeRef{Provider: "postgresql", Name: "query__done"}}, ""},
		{usdt.SpanSource{Probe: usdt.ProbeRef{Provider: "python", Name: "function__entry"}}, ""},
	} {
		got := silentHint(&c.src)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: hint %q, want one with %q", c.src.Describe(), got, c.want)
		}
	}
}

func TestSourceName(t *testing.T) {
	for _, c := range []struct {
		src  usdt.SpanSource
		want string
	}{
		{usdt.SpanSource{Span: "query", NameArg: -1, Start: usdt.ProbeRef{Provider: "p", Name: "s"}, End: usdt.ProbeRef{Provider: "p", Name: "e"}}, "query"},
		{usdt.SpanSource{Metric: "queue.depth", NameArg: -1, Probe: usdt.ProbeRef{Provider: "p", Name: "q"}}, "queue.depth"},
		{usdt.SpanSource{NameArg: 1, Start: usdt.ProbeRef{Provider: "hotspot", Name: "method__entry"}, End: usdt.ProbeRef{Provider: "hotspot", Name: "method__return"}}, "hotspot:method__entry arg1"},
		{usdt.SpanSource{NameArg: 0, Probe: usdt.ProbeRef{Provider: "python", Name: "function__return"}}, "python:function__return arg0"},
	} {
		if got := sourceName(&c.src); got != c.want {
			t.Errorf("%s: name %q, want %q", c.src.Describe(), got, c.want)
		}
	}
}
