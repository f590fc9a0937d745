//go:build linux

package symbolize

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// deepStack returns this goroutine's return addresses from depth nested
// calls down.
//
//go:noinline
func deepStack(depth int) []uint64 {
	if depth > 0 {
		return deepStack(depth - 1)
	}
	pcs := make([]uintptr, MaxStackDepth)
	n := runtime.Callers(0, pcs)
	out := make([]uint64, n)
	for i, pc := range pcs[:n] {
		out[i] = uint64(pc)
	}
	return out
}

// BenchmarkUser measures symbolization per frame, cold (a new Symbolizer:
// capture, open and parse the binary, then look up) against cached (the
// same stack again), for a Go binary (this test binary, pclntab) and a C
// binary (symbols plus DWARF lines, and libc's dynamic symbols).
//
// Measured on the 2-core build VM (Go 1.26, Linux 6.18, load average 9-12
// from other builds, -count 3):
//
//	go/cached   183-337 ns/frame   1 alloc per stack (the frames)
//	go/cold     2.9-4.0 ms/stack   (26 frames; a 9.5 MB test binary's pclntab)
//	c/cached    286-360 ns/frame   (5 frames: the per-stack costs show)
//	c/cold      308-401 µs/stack   (symbols and DWARF lines)
//
// against binutils addr2line on the same C binary, 3.3 ms per invocation
// for the same 5 addresses: the first lookup in a binary, which the
// collector pays once per binary, not per process or record, is about 10x
// cheaper, and a cached stack about 2000x.
func BenchmarkUser(b *testing.B) {
	self := uint32(os.Getpid())
	goStack := deepStack(20)

	bin := filepath.Join(b.TempDir(), "cprog")
	buildC(b, bin, filepath.Join("testdata", "cprog.c"))
	cmd, stdin := startBlocked(b, bin)
	defer stdin.Close()
	cpid := cmd.Process.Pid
	cStack := runtimeAddrs(b, cpid, bin, 1, "slow", "c", "b", "a", "main")

	for _, tc := range []struct {
		name  string
		pid   uint32
		stack []uint64
	}{
		{"go", self, goStack},
		{"c", uint32(cpid), cStack},
	} {
		b.Run(tc.name+"/cached", func(b *testing.B) {
			s := New(Config{})
			defer s.Close()
			if err := s.Capture(tc.pid); err != nil {
				b.Fatal(err)
			}
			frames, err := s.User(tc.pid, tc.stack)
			if err != nil || frames[0].Function == "" {
				b.Fatalf("warm-up: %v, %+v", err, frames)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				s.User(tc.pid, tc.stack)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(tc.stack)), "ns/frame")
		})
		b.Run(tc.name+"/cold", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				s := New(Config{})
				if err := s.Capture(tc.pid); err != nil {
					b.Fatal(err)
				}
				s.User(tc.pid, tc.stack)
				s.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(tc.stack)), "ns/frame")
		})
	}
}

// BenchmarkCapture measures Capture of a process already captured (one
// read of /proc/PID/stat), which the collector pays per overrun record,
// against a first capture (maps, opening files).
func BenchmarkCapture(b *testing.B) {
	self := uint32(os.Getpid())
	b.Run("cached", func(b *testing.B) {
		s := New(Config{})
		defer s.Close()
		if err := s.Capture(self); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if err := s.Capture(self); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			s := New(Config{})
			if err := s.Capture(self); err != nil {
				b.Fatal(err)
			}
			s.Close()
		}
	})
}

// BenchmarkKernel measures a cached kernel frame lookup.
func BenchmarkKernel(b *testing.B) {
	s := New(Config{})
	defer s.Close()
	k, err := readKallsyms("/proc/kallsyms")
	if err != nil {
		b.Skipf("skipping: %v", err)
	}
	addrs := make([]uint64, 0, 16)
	for i := 0; i < 16; i++ {
		addrs = append(addrs, k.syms[(i*7919)%len(k.syms)].addr+4)
	}
	if _, err := s.Kernel(addrs); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		s.Kernel(addrs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(addrs)), "ns/frame")
}
