package emit

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// BenchmarkDisabled measures recording a span while no collector listens:
// one load and a branch, no allocation.
func BenchmarkDisabled(b *testing.B) {
	if Enabled() {
		b.Skip("a collector is listening")
	}
	b.ReportAllocs()
	f := &Finished{Name: "checkout", Duration: time.Millisecond}
	b.Run("Record", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			Record(f)
		}
	})
	b.Run("StartEnd", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			Start("checkout").End(nil)
		}
	})
}

func TestDisabledAllocatesNothing(t *testing.T) {
	if Enabled() {
		t.Skip("a collector is listening")
	}
	err := errors.New("x")
	f := &Finished{Name: "checkout", Duration: time.Millisecond}
	if n := testing.AllocsPerRun(1000, func() {
		Record(f)
		Start("checkout").End(err)
	}); n != 0 {
		t.Fatalf("disabled span costs %v allocations, want 0", n)
	}
}

// TestFillName checks that a long name fills the payload's 128 bytes: the
// kernel cuts it to 127 on a character boundary and counts the cut.
func TestFillName(t *testing.T) {
	var ev event
	long := strings.Repeat("0123456789", 14)
	ev.fill(long, time.Unix(0, 42), 5*time.Millisecond, true)
	if string(ev.Name[:]) != long[:128] {
		t.Fatalf("name = %q", ev.Name)
	}
	if ev.DurationNs != 5e6 || ev.StartNs != 42 || ev.Status != statusError {
		t.Fatalf("event = %+v", ev)
	}
}
