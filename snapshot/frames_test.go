package snapshot

import "testing"

func TestTopFrames(t *testing.T) {
	stack := []Frame{
		{Addr: 0x49e80a, Function: "main.slow", File: "/src/main.go", Line: 26},
		{Addr: 0x49e7ef, Function: "main.c"},
		{Addr: 0x7f00001234, Module: "libfoo.so", Offset: 0x1234},
		{Addr: 0xdead},
	}
	for _, tc := range []struct {
		n    int
		want string
	}{
		{0, ""},
		{1, "main.slow (/src/main.go:26)\n... 3 more"},
		{4, "main.slow (/src/main.go:26)\nmain.c\nlibfoo.so+0x1234\n0xdead"},
		{10, "main.slow (/src/main.go:26)\nmain.c\nlibfoo.so+0x1234\n0xdead"},
	} {
		if got := TopFrames(stack, tc.n); got != tc.want {
			t.Errorf("TopFrames(n=%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	if got := TopFrames(nil, 5); got != "" {
		t.Errorf("TopFrames(nil) = %q", got)
	}
}

// TestWithoutKernelAddrs checks that kernel addresses are zeroed in a copy,
// names kept, user frames and the original untouched, and that a snapshot
// without kernel addresses is returned as it is.
func TestWithoutKernelAddrs(t *testing.T) {
	k := []Frame{{Addr: 0xffffffff81234567, Function: "do_nanosleep", Module: "[kernel]", Offset: 0x37}, {Addr: 0xffffffffc0a01234}}
	u := []Frame{{Addr: 0x401000, Function: "main.work"}}
	s := &Snapshot{Overruns: []Overrun{
		{Span: "plain", UserStack: u},
		{Span: "kernel", UserStack: u, KernelStack: k, Samples: []Sample{{Count: 1, KernelStack: k}, {Count: 2, UserStack: u}}},
	}}
	got := s.WithoutKernelAddrs()
	if got == s {
		t.Fatal("a snapshot with kernel addresses was returned as it is")
	}
	o := got.Overruns[1]
	for _, fs := range [][]Frame{o.KernelStack, o.Samples[0].KernelStack} {
		for _, f := range fs {
			if f.Addr != 0 {
				t.Errorf("kernel frame %+v keeps its address", f)
			}
		}
	}
	if o.KernelStack[0].Function != "do_nanosleep" || o.KernelStack[0].Offset != 0x37 || o.KernelStack[0].Module != "[kernel]" {
		t.Errorf("kernel frame lost its name: %+v", o.KernelStack[0])
	}
	if o.UserStack[0].Addr != 0x401000 || got.Overruns[0].UserStack[0].Addr != 0x401000 {
		t.Error("user frames changed")
	}
	if s.Overruns[1].KernelStack[0].Addr != 0xffffffff81234567 || s.Overruns[1].Samples[0].KernelStack[1].Addr != 0xffffffffc0a01234 {
		t.Error("the original snapshot changed")
	}
	plain := &Snapshot{Overruns: []Overrun{{Span: "plain", UserStack: u}}}
	if plain.WithoutKernelAddrs() != plain {
		t.Error("a snapshot without kernel addresses was copied")
	}
}
