//go:build linux

package collector

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/internal/usdt"
	"github.com/spanwatch/spanwatch/snapshot"
	usdtsource "github.com/spanwatch/spanwatch/source/usdt"
)

// jvm17 is Debian's OpenJDK 17 for the machine's architecture.
var jvm17 = "/usr/lib/jvm/java-17-openjdk-" + runtime.GOARCH

// hotJava calls a method in a loop, forever, once it has said ready.
const hotJava = `public class Hot {
    static int work(int i) { return i * 31 + 7; }
    public static void main(String[] a) throws Exception {
        System.out.println("ready");
        int x = 0;
        for (;;) {
            for (int i = 0; i < 100; i++) x += work(i);
            Thread.sleep(10);
            if (x == 42) System.out.println(x);
        }
    }
}
`

// TestUSDTSilentJVM attaches the method probes of Debian's OpenJDK 17
// (hotspot:method__entry and method__return in libjvm.so) while a JVM
// calls methods in a loop. Started without -XX:+ExtendedDTraceProbes the
// JVM never fires them: past silent_after the snapshot reports the
// source silent with the switch, and no hit. Started with it, the same
// probes count hits and the source is no longer silent.
func TestUSDTSilentJVM(t *testing.T) {
	libjvm := filepath.Join(jvm17, "lib/server/libjvm.so")
	java := filepath.Join(jvm17, "bin/java")
	for _, p := range []string{libjvm, java} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("no %s: install openjdk-17-jdk-headless", p)
		}
	}
	requireBPF(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "Hot.java")
	if err := os.WriteFile(src, []byte(hotJava), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const silentAfter = 2 * time.Second
	tr, err := usdtsource.Attach(context.Background(), c.SourceCore(), []usdt.SpanSource{{
		Binary: libjvm, Span: "jvm.method", NameArg: -1, KeyArg: -1, StatusArg: -1, DurationArg: -1, ValueArg: -1,
		Start:       usdt.ProbeRef{Provider: "hotspot", Name: "method__entry"},
		End:         usdt.ProbeRef{Provider: "hotspot", Name: "method__return"},
		SilentAfter: silentAfter,
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()

	// run starts the JVM (the source-file launcher: no javac needed)
	// and, when ready is set, waits for it to be calling work in its
	// loop.
	run := func(ready bool, flags ...string) *exec.Cmd {
		t.Helper()
		cmd := exec.Command(java, append(flags, src)...)
		cmd.Stderr = os.Stderr
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		if sc := bufio.NewScanner(out); ready && (!sc.Scan() || sc.Text() != "ready") {
			t.Fatalf("java %v said %q, want ready", flags, sc.Text())
		}
		return cmd
	}
	health := func() snapshot.SourceHealth {
		t.Helper()
		s, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Stats.Sources) != 1 {
			t.Fatalf("snapshot sources %+v, want the JVM's", s.Stats.Sources)
		}
		return s.Stats.Sources[0]
	}

	start := time.Now()
	plain := run(true)
	t.Logf("a JVM without the switch ready in %v", time.Since(start))
	if h := health(); h.Silent && time.Since(start) < silentAfter {
		t.Errorf("silent %v after attaching, before silent_after (%s)", time.Since(start), silentAfter)
	}
	time.Sleep(time.Until(start.Add(silentAfter + 500*time.Millisecond)))
	h := health()
	if !h.Silent || h.Hits != 0 || h.Sites == 0 || !strings.Contains(h.Hint, "-XX:+ExtendedDTraceProbes") || h.Name != "jvm.method" {
		t.Fatalf("a JVM without -XX:+ExtendedDTraceProbes: %+v; want silent, 0 hits, the switch as hint", h)
	}
	plain.Process.Kill()
	plain.Wait()

	// Its start alone calls thousands of methods: with a trap each, its
	// compiler takes minutes to get to main here. The hits come first.
	flagged := time.Now()
	run(false, "-XX:+ExtendedDTraceProbes")
	var hits uint64
	deadline := time.Now().Add(60 * time.Second)
	for hits < 1000 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		h = health()
		hits += h.Hits
		// Silent until its first hit (the JVM may not have run a
		// method yet on a loaded machine), never after one.
		if h.Silent && hits > 0 {
			t.Fatalf("silent with %d hits: %+v", hits, h)
		}
	}
	t.Logf("%d hits in %v from a JVM with -XX:+ExtendedDTraceProbes", hits, time.Since(flagged).Round(time.Millisecond))
	if hits < 1000 {
		t.Errorf("%d hits in 60 s from a JVM with -XX:+ExtendedDTraceProbes calling methods, want thousands", hits)
	}
}
