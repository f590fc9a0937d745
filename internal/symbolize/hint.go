package symbolize

import (
	"fmt"
	"strings"

	"github.com/spanwatch/spanwatch/snapshot"
)

// MaxStackDepth is the most frames bpf_get_stack returns (the kernel's
// default kernel.perf_event_max_stack).
const MaxStackDepth = 127

// threadRoots are the functions a complete user stack ends in: where the
// C runtime, the thread library or the Go runtime starts a thread or a
// goroutine. Prefix matches, so versioned and suffixed names count.
var threadRoots = []string{
	"_start", "__libc_start_main", "__libc_start_call_main", "start_thread",
	"clone", "__clone", "thread_start", "runtime.goexit", "runtime.rt0_go",
	"runtime.mstart", "runtime.main", "_rt0_",
}

// Hint explains a user stack that looks cut short, for
// snapshot.Overrun.StackError; it returns "" for a stack that reaches a
// thread's entry point. The kernel walks user stacks by frame pointers, so
// the walk stops at the first function built without them (common for C
// and C++ built with -O2, and for distribution libraries): the stack then
// ends after a frame or two, often inside libc. See docs/stacks.md.
func Hint(frames []snapshot.Frame) string {
	if len(frames) == 0 {
		return "empty user stack: the thread was in the kernel without a user context, or the first frame had no frame pointer"
	}
	// Inlined calls share their caller's address: count addresses.
	addrs := 0
	for _, f := range frames {
		if !f.Inlined {
			addrs++
		}
	}
	if addrs >= MaxStackDepth {
		return fmt.Sprintf("user stack truncated at %d frames", addrs)
	}
	// The C runtime's own frames below main often carry no symbol (they
	// are local to libc), so a root among the last few frames counts.
	for _, f := range frames[max(0, len(frames)-3):] {
		if f.Function == "main" {
			return ""
		}
		for _, r := range threadRoots {
			if strings.HasPrefix(f.Function, r) {
				return ""
			}
		}
	}
	last := frames[len(frames)-1]
	where := last.String()
	if last.Module != "" && last.Function != "" {
		where += " in " + last.Module
	}
	n := fmt.Sprintf("%d frames", addrs)
	if addrs == 1 {
		n = "1 frame"
	}
	return fmt.Sprintf("user stack stops after %s at %s without reaching a thread entry point: "+
		"code on this stack was likely built without frame pointers (build with -fno-omit-frame-pointer; see docs/stacks.md)",
		n, where)
}
