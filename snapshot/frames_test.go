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
