package snapshot

import (
	"fmt"
	"slices"
	"strings"
)

// TopFrames renders the innermost n frames of a stack, one per line, for
// alert annotations and logs; a last line counts the frames left out. It
// returns "" for an empty stack.
func TopFrames(frames []Frame, n int) string {
	if len(frames) == 0 || n <= 0 {
		return ""
	}
	var b strings.Builder
	for i, f := range frames {
		if i == n {
			fmt.Fprintf(&b, "\n... %d more", len(frames)-n)
			break
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(f.String())
	}
	return b.String()
}

// WithoutKernelAddrs returns o with the address of every kernel frame (of
// its stack and of its samples') set to 0, keeping the function, module
// and offset: what a reader who may not learn where the kernel sits (an
// address defeats KASLR) is served. It returns o itself when o has no
// kernel address; otherwise a copy that shares nothing it changed with o.
func (o *Overrun) WithoutKernelAddrs() *Overrun {
	if !hasAddr(o.KernelStack) && !slices.ContainsFunc(o.Samples, func(s Sample) bool { return hasAddr(s.KernelStack) }) {
		return o
	}
	out := *o
	out.KernelStack = zeroAddrs(o.KernelStack)
	if len(o.Samples) > 0 {
		out.Samples = slices.Clone(o.Samples)
		for i := range out.Samples {
			out.Samples[i].KernelStack = zeroAddrs(out.Samples[i].KernelStack)
		}
	}
	return &out
}

func hasAddr(frames []Frame) bool {
	return slices.ContainsFunc(frames, func(f Frame) bool { return f.Addr != 0 })
}

func zeroAddrs(frames []Frame) []Frame {
	if !hasAddr(frames) {
		return frames
	}
	out := slices.Clone(frames)
	for i := range out {
		out[i].Addr = 0
	}
	return out
}

// WithoutKernelAddrs returns s with its overruns' kernel addresses set to
// 0 (Overrun.WithoutKernelAddrs); s itself when it has none, else a
// shallow copy whose overruns are copies.
func (s *Snapshot) WithoutKernelAddrs() *Snapshot {
	var ovs []Overrun
	for i := range s.Overruns {
		o := s.Overruns[i].WithoutKernelAddrs()
		if o == &s.Overruns[i] {
			continue
		}
		if ovs == nil {
			ovs = slices.Clone(s.Overruns)
		}
		ovs[i] = *o
	}
	if ovs == nil {
		return s
	}
	out := *s
	out.Overruns = ovs
	return &out
}
