package emit

import (
	"runtime"
	"testing"
)

// TestGetg checks the g pointer spans carry as exec_id where getg is in
// assembly (amd64, arm64): non-zero, the same for one goroutine across
// calls and threads, and different for two goroutines alive together.
func TestGetg(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		if g := getg(); g != 0 {
			t.Fatalf("getg() = %#x without assembly, want 0", g)
		}
		t.Skipf("no getg assembly on %s", runtime.GOARCH)
	}
	g := getg()
	if g == 0 {
		t.Fatal("getg() = 0")
	}
	for i := 0; i < 100; i++ {
		runtime.Gosched() // may resume on another thread
		if again := getg(); again != g {
			t.Fatalf("getg() = %#x, then %#x in the same goroutine", g, again)
		}
	}
	other := make(chan uintptr)
	release := make(chan struct{})
	go func() {
		other <- getg()
		<-release
	}()
	o := <-other
	close(release)
	if o == 0 || o == g {
		t.Errorf("another goroutine's getg() = %#x, this one's %#x: want a different non-zero pointer", o, g)
	}
}
