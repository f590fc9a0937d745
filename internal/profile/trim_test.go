package profile

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

func frames(spec string) []snapshot.Frame {
	var out []snapshot.Frame
	for _, s := range strings.Split(spec, ",") {
		f := snapshot.Frame{Function: s}
		if file, ok := strings.CutPrefix(s, "go:"); ok {
			f.Function, f.File = file, "x.go"
		}
		if s == "?" {
			f = snapshot.Frame{Addr: 0x1234, Module: "app", Offset: 0x234}
		}
		out = append(out, f)
	}
	return out
}

func names(fs []snapshot.Frame) string {
	var n []string
	for _, f := range fs {
		n = append(n, frameName(f))
	}
	return strings.Join(n, ",")
}

func TestTrimOwn(t *testing.T) {
	const (
		emit   = "github.com/spanwatch/spanwatch/emit."
		otel   = "github.com/spanwatch/spanwatch/emit/otel."
		sdk    = "go.opentelemetry.io/otel/sdk/trace."
		ue     = "github.com/spanwatch/spanwatch/userevents."
		contri = "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp."
	)
	for _, tc := range []struct {
		name, in, want string
		trimmed        int
	}{
		{"marker", emit + "marker," + emit + "send," + emit + "Span.End,main.chargeCard,main.main", "main.chargeCard,main.main", 3},
		{"otel", emit + "marker," + emit + "Record," + otel + "(*SpanProcessor).send," + otel + "(*SpanProcessor).OnEnd," +
			sdk + "(*recordingSpan).End,main.loadOrder,main.main", "main.loadOrder,main.main", 5},
		{"otel server span ended by otelhttp", emit + "marker," + emit + "Record," + sdk + "(*recordingSpan).End," +
			contri + "(*middleware).serveHTTP," + contri + "NewMiddleware.func1.1,net/http.HandlerFunc.ServeHTTP",
			"net/http.HandlerFunc.ServeHTTP", 5},
		{"user_events from Go", "internal/runtime/syscall.Syscall6,syscall.RawSyscall6,golang.org/x/sys/unix.writev," +
			ue + "(*Event).Write," + emit + "writeUserEvent," + emit + "Span.End,main.work", "main.work", 6},
		// As Go 1.26 builds it (the user_events lane of the kernel matrix).
		{"user_events from Go 1.26", "internal/runtime/syscall/linux.Syscall6,syscall.Syscall,syscall.Syscall," +
			ue + "(*Event).Write," + emit + "ueWrite," + emit + "writeUserEvent," + emit + "send," + emit + "Span.End,main.demoCheckout,main.main",
			"main.demoCheckout,main.main", 8},
		{"C header", "writev,spanwatch_emit_event,spanwatch_span_end,handle_request,main", "handle_request,main", 3},
		{"C header inlined: libc wrapper over user code is kept", "writev,handle_request,main", "writev,handle_request,main", 0},
		{"Node.js OpenTelemetry processor through the addon", "spanwatch_marker_,spanwatch_js_record," +
			"v8impl::(anonymous namespace)::FunctionCallbackWrapper::Invoke,v8::internal::Builtin_HandleApiCall," +
			"Builtins_CEntry_Return1_ArgvOnStack_BuiltinExit,JS:~spanwatchOnEnd /app/node_modules/spanwatch/otel.js:55:65," +
			"JS:*onEnd /app/node_modules/@opentelemetry/sdk-trace-base/build/src/MultiSpanProcessor.js:50:10," +
			"JS:^end /app/node_modules/@opentelemetry/sdk-trace-base/build/src/Span.js:177:8," +
			"JS:~handleCheckout /app/server.js:31:24,JS:~main /app/server.js:47:20",
			"JS:~handleCheckout /app/server.js:31:24,JS:~main /app/server.js:47:20", 8},
		{"older V8 names", "spanwatch_js_record,LazyCompile:*spanwatchEnd /app/node_modules/spanwatch/index.js:60,LazyCompile:~handle /app/s.js:3",
			"LazyCompile:~handle /app/s.js:3", 2},
		{"a user's JavaScript function is not own", "JS:~end /app/s.js:3:1,JS:~main /app/s.js:9:1", "JS:~end /app/s.js:3:1,JS:~main /app/s.js:9:1", 0},
		{"V8 glue alone is kept", "Builtins_CEntry_Return1_ArgvOnStack_BuiltinExit,JS:~main /app/s.js:9:1",
			"Builtins_CEntry_Return1_ArgvOnStack_BuiltinExit,JS:~main /app/s.js:9:1", 0},
		{"Python extension", "spanwatch_marker_,spanwatch_py_emit_,py::handle_checkout:/app/service.py,py::main:/app/service.py",
			"py::handle_checkout:/app/service.py,py::main:/app/service.py", 2},
		{"Java through JNI", "spanwatch_marker_,spanwatch_jni_record," +
			"void io.spanwatch.Spanwatch.nativeRecord(java.lang.String; long; long; boolean; byte[]; byte[])," +
			"void io.spanwatch.Span.close(),void Service.handleCheckout(java.lang.String; int),Interpreter",
			"void Service.handleCheckout(java.lang.String; int),Interpreter", 4},
		{"a Java class of another package is not own", "void io.spanwatchers.App.run(),Interpreter",
			"void io.spanwatchers.App.run(),Interpreter", 0},
		{"no own frames", "main.slow,main.main", "main.slow,main.main", 0},
		{"only own frames are kept", emit + "marker," + emit + "Record", emit + "marker," + emit + "Record", 0},
		{"unnamed frame ends the own run", emit + "marker,?,main.main", "app+0x234,main.main", 1},
		{"own frames below user code stay", "main.cb," + emit + "Record,main.main", "main.cb," + emit + "Record,main.main", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := frames(tc.in)
			got, n := TrimOwn(in)
			if names(got) != tc.want || n != tc.trimmed {
				t.Errorf("TrimOwn(%s) = %s (%d trimmed), want %s (%d)", tc.in, names(got), n, tc.want, tc.trimmed)
			}
			if names(in) != names(frames(tc.in)) {
				t.Errorf("TrimOwn modified its input: %s", names(in))
			}
		})
	}
}

// TestTrimEnd: the end stack of a span sent over user_events loses the
// system call wrapper at its top also when include/spanwatch.h was
// inlined (seen in the user_events VM: writev, handle_checkout.cold);
// other sources keep a wrapper no own frame follows.
func TestTrimEnd(t *testing.T) {
	for _, tc := range []struct {
		name, source, in, want string
		trimmed                int
	}{
		{"inlined header over user_events", "user_events", "writev,handle_checkout.cold,0x4", "handle_checkout.cold,0x4", 1},
		{"two wrappers", "user_events", "__GI___writev,writev,handle_request,main", "handle_request,main", 2},
		{"library over user_events", "user_events", "writev,spanwatch_lib_record.cold,handle_checkout,main", "handle_checkout,main", 2},
		{"Go over user_events", "user_events", "syscall.Syscall,github.com/spanwatch/spanwatch/emit.send,main.work", "main.work", 2},
		{"only wrappers are kept", "user_events", "writev,syscall", "writev,syscall", 0},
		{"no wrapper", "user_events", "handle_request,main", "handle_request,main", 0},
		{"a function span on writev keeps it", "function", "writev,handle_request,main", "writev,handle_request,main", 0},
		{"marker", "marker", "spanwatch_marker_,handle_request,main", "handle_request,main", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, n := TrimEnd(tc.source, frames(tc.in))
			if names(got) != tc.want || n != tc.trimmed {
				t.Errorf("TrimEnd(%s, %s) = %s (%d trimmed), want %s (%d)", tc.source, tc.in, names(got), n, tc.want, tc.trimmed)
			}
		})
	}
}

func TestIsRuntimeFrame(t *testing.T) {
	for _, tc := range []struct {
		f    snapshot.Frame
		want bool
	}{
		{snapshot.Frame{Function: "runtime.gopark", File: "/go/src/runtime/proc.go"}, true},
		{snapshot.Frame{Function: "time.Sleep", File: "/go/src/runtime/time.go"}, true},
		{snapshot.Frame{Function: "net/http.(*conn).serve", File: "/go/src/net/http/server.go"}, true},
		{snapshot.Frame{Function: "internal/poll.(*FD).Read", File: "/go/src/internal/poll/fd_unix.go"}, true},
		{snapshot.Frame{Function: "main.chargeCard", File: "/src/main.go"}, false},
		{snapshot.Frame{Function: "github.com/shop/pay.(*Client).Charge", File: "/src/pay/client.go"}, false},
		{snapshot.Frame{Function: "process_request.part.0", File: "server.c"}, false},
		{snapshot.Frame{Function: "do_work"}, false},
		{snapshot.Frame{Function: "read", Module: "libc.so.6"}, true},
		{snapshot.Frame{Function: "clock_gettime", Module: "[vdso]"}, true},
		{snapshot.Frame{Module: "app", Offset: 0x10}, false},
	} {
		if got := isRuntimeFrame(tc.f); got != tc.want {
			t.Errorf("isRuntimeFrame(%s in %s) = %v, want %v", tc.f.Function, tc.f.Module, got, tc.want)
		}
	}
}

func TestHottest(t *testing.T) {
	spin := frames("go:time.Now,go:main.spin,go:main.charge,go:main.main")
	spinOther := frames("go:runtime.nanotime,go:time.Now,go:main.spin,go:main.charge,go:main.main")
	sleep := frames("go:runtime.gopark,go:time.Sleep,go:main.charge,go:main.main")
	own := append(frames("github.com/spanwatch/spanwatch/emit.marker"), frames("go:main.charge,go:main.main")...)
	for _, tc := range []struct {
		name    string
		samples []snapshot.Sample
		n       int
		want    string
	}{
		{"by weight, merged, leaf named", []snapshot.Sample{
			{Count: 10, WeightNs: 100, UserStack: spin},
			{Count: 2, WeightNs: 20, UserStack: spinOther},
			{Count: 1, WeightNs: 50, OffCPU: true, UserStack: sleep},
		}, 0, "main.spin:120/0/12/time.Now;main.charge:50/50/1/runtime.gopark"},
		{"n bounds", []snapshot.Sample{
			{Count: 10, WeightNs: 100, UserStack: spin},
			{Count: 1, WeightNs: 50, OffCPU: true, UserStack: sleep},
		}, 1, "main.spin:100/0/10/time.Now"},
		{"own frames trimmed first", []snapshot.Sample{{Count: 3, WeightNs: 30, UserStack: own}}, 0, "main.charge:30/0/3/"},
		{"by count without weights", []snapshot.Sample{
			{Count: 1, UserStack: sleep},
			{Count: 4, UserStack: spin},
		}, 0, "main.spin:0/0/4/time.Now;main.charge:0/0/1/runtime.gopark"},
		{"only runtime frames: the innermost", []snapshot.Sample{{Count: 1, WeightNs: 5, UserStack: frames("go:runtime.futex,go:runtime.mstart")}}, 0, "runtime.futex:5/0/1/"},
		{"empty stacks skipped", []snapshot.Sample{{Count: 1, WeightNs: 5}}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, h := range Hottest(tc.samples, tc.n) {
				got = append(got, strings.Join([]string{h.Frame.Function, ":", itoa(h.WeightNs), "/", itoa(h.OffCPUNs), "/", itoa(h.Count), "/", h.Leaf}, ""))
			}
			if strings.Join(got, ";") != tc.want {
				t.Errorf("Hottest = %s, want %s", strings.Join(got, ";"), tc.want)
			}
		})
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

func TestFormatHottest(t *testing.T) {
	hot := []HotFrame{
		{Frame: snapshot.Frame{Function: "main.spin", File: "main.go", Line: 30}, Leaf: "time.Now", WeightNs: 200e6, Count: 20},
		{Frame: snapshot.Frame{Function: "main.charge", File: "main.go", Line: 12}, WeightNs: 100e6, OffCPUNs: 40e6, Count: 3},
		{Frame: snapshot.Frame{Function: "main.wait"}, WeightNs: 50e6, OffCPUNs: 50e6, Count: 1},
	}
	want := " 50% main.spin (main.go:30) on-CPU, in time.Now\n" +
		" 25% main.charge (main.go:12) 40ms off-CPU\n" +
		" 13% main.wait off-CPU"
	if got := FormatHottest(hot, 400e6); got != want {
		t.Errorf("FormatHottest:\n%s\nwant:\n%s", got, want)
	}
	if got := FormatHottest([]HotFrame{{Frame: snapshot.Frame{Function: "main.x"}, Count: 2}}, 0); got != "2× main.x" {
		t.Errorf("FormatHottest without weights = %q", got)
	}
}

func TestSuperseded(t *testing.T) {
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ovs := []snapshot.Overrun{
		{Span: "a", PID: 1, Time: at(1.1), DurationNs: 100e6, StillRunning: true},  // started at 1.0
		{Span: "a", PID: 1, Time: at(1.3), DurationNs: 300e6},                      // its end
		{Span: "b", PID: 1, Time: at(2.1), DurationNs: 100e6, StillRunning: true},  // never ended
		{Span: "a", PID: 2, Time: at(1.1), DurationNs: 100e6, StillRunning: true},  // another process
		{Span: "c", PID: 1, Time: at(1.15), DurationNs: 140e6, StillRunning: true}, // started 10ms later
	}
	var got []string
	for _, o := range Superseded(ovs) {
		got = append(got, fmt.Sprintf("%s/%d/%v", o.Span, o.PID, o.StillRunning))
	}
	if want := "a/1/false b/1/true a/2/true c/1/true"; strings.Join(got, " ") != want {
		t.Errorf("Superseded = %v, want %s", got, want)
	}
	// a's end, the other process's a still running (apart: its stack is
	// where it stood, not where it ended), c, b.
	if st := Aggregate(ovs); len(st) != 4 || st[0].Span != "a" || st[0].StillRunning != 0 || st[1].Span != "a" || st[1].StillRunning != 1 {
		t.Errorf("Aggregate = %+v, want a, a still running, c, b", st)
	}
}
