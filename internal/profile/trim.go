package profile

import (
	"strings"

	"github.com/spanwatch/spanwatch/snapshot"
)

// ownPrefixes are the functions that hand a span to the kernel: spanwatch's
// SDKs (Go and C) and the OpenTelemetry code that ends a span and calls the
// span processors. A stack captured when a span ends starts with them, above
// the code that ended the span.
var ownPrefixes = []string{
	"github.com/spanwatch/spanwatch/emit.",
	"github.com/spanwatch/spanwatch/emit/otel.",
	"github.com/spanwatch/spanwatch/userevents.",
	"go.opentelemetry.io/otel/sdk/trace.",
	// Instrumentation libraries (otelhttp, otelgrpc, ...) end the spans
	// they start, in their own middleware.
	"go.opentelemetry.io/contrib/instrumentation/",
	// include/spanwatch.h, when the compiler did not inline it, and the
	// native parts of the SDKs for other languages built from it
	// (libspanwatch, the Python extension, the Node.js addon, the JNI
	// library), whose C functions are all named spanwatch_*.
	"spanwatch_",
}

// jsFrame splits a JavaScript frame as V8 names it in its perf map
// (--perf-basic-prof): "JS:~name /path/file.js:line:col" (Node.js 20+;
// the mark after the colon says how the function is compiled) or
// "LazyCompile:*name /path/file.js:line" (older), into the function's
// name and where it is.
func jsFrame(name string) (fn, loc string, ok bool) {
	for _, p := range []string{"JS:", "LazyCompile:", "Function:", "InterpretedFunction:"} {
		if rest, found := strings.CutPrefix(name, p); found {
			rest = strings.TrimLeft(rest, "~*^+-")
			fn, loc, _ = strings.Cut(rest, " ")
			return fn, loc, true
		}
	}
	return "", "", false
}

// ownJS reports whether a JavaScript frame hands a span to spanwatch: the
// Node.js SDK's functions (all named spanwatch*) and OpenTelemetry JS's
// span ending and processors (under node_modules/@opentelemetry/).
func ownJS(name string) bool {
	fn, loc, ok := jsFrame(name)
	return ok && (strings.HasPrefix(fn, "spanwatch") || strings.Contains(loc, "/@opentelemetry/"))
}

// glueFunctions are what the SDKs call on their way into the kernel: the
// system call wrappers of libc and Go. They are trimmed only above an own
// frame, never on their own.
var gluePrefixes = []string{
	"syscall.", "golang.org/x/sys/unix.", "internal/runtime/syscall.",
	// Go 1.26 moved the raw system call into a package per OS.
	"internal/runtime/syscall/",
	"runtime.entersyscall", "runtime.exitsyscall", "runtime/internal/syscall.",
	"writev", "__writev", "__GI___writev", "syscall", "__syscall",
	// Node.js and V8 between JavaScript and a native addon (N-API, the
	// API callback builtins).
	"v8impl::", "v8::internal::", "Builtins_", "Builtin:",
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// IsOwnFrame reports whether f is a frame of the code that hands a span to
// spanwatch (the span SDKs, the OpenTelemetry SDK's span ending), which
// TrimOwn leaves out of the top of a stack.
func IsOwnFrame(f snapshot.Frame) bool {
	return f.Function != "" && (hasAnyPrefix(f.Function, ownPrefixes) || ownJS(f.Function) || ownJava(f.Function))
}

// ownJava reports whether a Java frame, as the JVM names compiled methods
// in its perf map ("void io.spanwatch.Span.close()": the return type, then
// the qualified method and its parameters), is the Java SDK's
// (io.spanwatch).
func ownJava(name string) bool {
	_, method, ok := strings.Cut(name, " ")
	return ok && strings.HasPrefix(method, "io.spanwatch.") && strings.HasSuffix(method, ")")
}

// TrimOwn returns frames (innermost first) without the frames at the top
// that belong to spanwatch's span SDKs and to the OpenTelemetry SDK ending
// the span (and the system call wrappers they call), so that the first
// frame is the code that ended the span. It returns the number of frames
// left out. frames itself is not modified: the raw record keeps them.
func TrimOwn(frames []snapshot.Frame) ([]snapshot.Frame, int) {
	last := -1
	for i, f := range frames {
		switch {
		case IsOwnFrame(f):
			last = i
		case f.Function != "" && hasAnyPrefix(f.Function, gluePrefixes):
			// Trimmed only when an own frame follows.
		default:
			return frames[last+1:], last + 1
		}
	}
	if last == len(frames)-1 && last >= 0 {
		// Nothing but own frames: keep them rather than show nothing.
		return frames, 0
	}
	return frames[last+1:], last + 1
}

// TrimEnd is TrimOwn for the stack an overrun's span ended on, captured
// by its source. A span sent over user_events is captured inside the
// writev system call that sends it, so the system call wrappers at the top
// of that stack are always the sending ones, and are trimmed also when no
// SDK frame follows them: include/spanwatch.h inlined into the
// application's function, which then calls writev itself (gcc -O2 puts
// the call in FUNC.cold). Stacks of other sources keep a wrapper that no
// own frame follows (a function span on writev itself ends in writev).
func TrimEnd(source string, frames []snapshot.Frame) ([]snapshot.Frame, int) {
	if source != "user_events" {
		return TrimOwn(frames)
	}
	glue := 0
	for glue < len(frames) && frames[glue].Function != "" && hasAnyPrefix(frames[glue].Function, gluePrefixes) {
		glue++
	}
	if glue == len(frames) {
		return frames, 0 // nothing but wrappers: keep them
	}
	rest, n := TrimOwn(frames[glue:])
	if n == 0 && len(rest) == len(frames)-glue {
		return rest, glue
	}
	return rest, glue + n
}
