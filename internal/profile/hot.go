package profile

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

// A HotFrame is a function where a span's sampled time went: the innermost
// frame of the samples' user stacks that is the application's own code
// (not the Go runtime, the Go standard library or libc), with the time and
// the samples that were in it.
type HotFrame struct {
	Frame snapshot.Frame `json:"frame"`
	// Leaf is the innermost function of the heaviest of these samples
	// when it is not Frame itself (time.Now under main.spin, say).
	Leaf     string `json:"leaf,omitempty"`
	WeightNs uint64 `json:"weight_ns"`
	Count    uint64 `json:"count"`
	// OffCPUNs is the part of WeightNs spent off the CPU.
	OffCPUNs uint64 `json:"off_cpu_ns,omitempty"`
}

// Hottest returns the n heaviest HotFrames of samples (all when n is 0),
// heaviest first; frames are told apart by function, file and line. When
// no sample has a weight (a span reported while still running has only
// its first samples) they are ranked by count.
func Hottest(samples []snapshot.Sample, n int) []HotFrame {
	type key struct {
		fn, file string
		line     int
	}
	index := map[key]int{}
	leafW := map[int]map[string]uint64{}
	var out []HotFrame
	for _, s := range samples {
		user, _ := TrimOwn(s.UserStack)
		i, leaf := hotIndex(user)
		if i < 0 {
			continue
		}
		f := user[i]
		k := key{frameName(f), f.File, f.Line}
		j, ok := index[k]
		if !ok {
			j = len(out)
			index[k] = j
			out = append(out, HotFrame{Frame: f})
			leafW[j] = map[string]uint64{}
		}
		h := &out[j]
		h.WeightNs += s.WeightNs
		h.Count += s.Count
		if s.OffCPU {
			h.OffCPUNs += s.WeightNs
		}
		if leaf != "" {
			leafW[j][leaf] += s.WeightNs + s.Count
		}
	}
	for j := range out {
		var best string
		var bw uint64
		for l, w := range leafW[j] {
			if w > bw || (w == bw && l < best) {
				best, bw = l, w
			}
		}
		out[j].Leaf = best
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].WeightNs != out[j].WeightNs {
			return out[i].WeightNs > out[j].WeightNs
		}
		return out[i].Count > out[j].Count
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// hotIndex returns the index of the innermost application frame of a user
// stack (the innermost frame when there is none), and the innermost
// function's name when it is another frame's; -1 for an empty stack.
func hotIndex(user []snapshot.Frame) (int, string) {
	if len(user) == 0 {
		return -1, ""
	}
	for i, f := range user {
		if !isRuntimeFrame(f) {
			if i == 0 {
				return 0, ""
			}
			return i, frameName(user[0])
		}
	}
	return 0, ""
}

// runtimeModules are C runtime libraries: their frames are where a C
// program blocks or copies, not what it does.
var runtimeModules = []string{"libc.so", "libc-", "libpthread", "ld-linux", "libstdc++", "[vdso]"}

// isRuntimeFrame reports whether f belongs to a language's runtime or
// standard library rather than to the application: Go packages whose
// import path has no dot in its first element (the standard library,
// except main), and the C runtime libraries.
func isRuntimeFrame(f snapshot.Frame) bool {
	for _, m := range runtimeModules {
		if strings.HasPrefix(f.Module, m) {
			return true
		}
	}
	fn := f.Function
	if fn == "" || !strings.HasSuffix(f.File, ".go") && !strings.HasSuffix(f.File, ".s") {
		return false // C, C++ or unnamed: the application's
	}
	// A Go symbol is "path/to/pkg.Func" or "pkg.(*T).Method".
	slash := strings.LastIndexByte(fn, '/')
	dot := strings.IndexByte(fn[slash+1:], '.')
	if dot < 0 {
		return false
	}
	pkg := fn[:slash+1+dot]
	if pkg == "main" {
		return false
	}
	first, _, _ := strings.Cut(pkg, "/")
	return !strings.Contains(first, ".")
}

// FormatHottest renders hot frames for an alert or a terminal, one a line:
// the share of total, the frame, on or off the CPU, and the innermost
// function when it is another. total is the span's duration (0: shares of
// the hot frames' own sum).
func FormatHottest(hot []HotFrame, total uint64) string {
	if total == 0 {
		for _, h := range hot {
			total += h.WeightNs
		}
	}
	var b strings.Builder
	for i, h := range hot {
		if i > 0 {
			b.WriteByte('\n')
		}
		if total > 0 && h.WeightNs > 0 {
			fmt.Fprintf(&b, "%3d%% ", (h.WeightNs*100+total/2)/total)
		} else {
			fmt.Fprintf(&b, "%d× ", h.Count)
		}
		b.WriteString(h.Frame.String())
		switch {
		case h.OffCPUNs == 0 && h.WeightNs > 0:
			b.WriteString(" on-CPU")
		case h.OffCPUNs == h.WeightNs && h.WeightNs > 0:
			b.WriteString(" off-CPU")
		case h.WeightNs > 0:
			fmt.Fprintf(&b, " %v off-CPU", time.Duration(h.OffCPUNs).Round(time.Millisecond))
		}
		if h.Leaf != "" {
			fmt.Fprintf(&b, ", in %s", h.Leaf)
		}
	}
	return b.String()
}
