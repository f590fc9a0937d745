//go:build linux

package java

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/collector"
	"github.com/spanwatch/spanwatch/internal/sdktest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	sdktest.Cleanup()
	os.Exit(code)
}

// jdk is Debian's OpenJDK 17, the one the SDK is tested with.
const jdk = "/usr/lib/jvm/java-17-openjdk-" + runtime.GOARCH

// build builds the SDK (make) and the test programs into dir, skipping
// where the JDK is missing.
func build(tb testing.TB, dir string) {
	tb.Helper()
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		tb.Skipf("the SDK has no marker on %s", runtime.GOARCH)
	}
	if _, err := os.Stat(filepath.Join(jdk, "bin", "javac")); err != nil {
		tb.Skipf("%s/bin/javac not installed (Debian package openjdk-17-jdk-headless)", jdk)
	}
	sdktest.RequireTool(tb, "make", "Debian package make")
	sdktest.RequireTool(tb, "gcc", "Debian package build-essential")
	cmd := exec.Command("make", "-s", "O="+dir, "JAVAC="+filepath.Join(jdk, "bin", "javac"), "JAR="+filepath.Join(jdk, "bin", "jar"), "JAVA_HOME="+jdk)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("make: %v\n%s", err, out)
	}
	args := []string{"--release", "17", "-cp", filepath.Join(dir, "spanwatch.jar"), "-d", dir, "testdata/Service.java", "testdata/Bench.java"}
	if out, err := exec.Command(filepath.Join(jdk, "bin", "javac"), args...).CombinedOutput(); err != nil {
		tb.Fatalf("javac: %v\n%s", err, out)
	}
}

// java runs a class of the sandbox with the SDK.
func java(sb *sdktest.Sandbox, args ...string) *exec.Cmd {
	return sb.Command(filepath.Join(jdk, "bin", "java"), append([]string{
		"-cp", sb.Path("spanwatch.jar") + ":" + sb.Path(""),
		"-Dspanwatch.library=" + sb.Path("libspanwatch_jni.so"),
	}, args...)...)
}

// TestService runs testdata/Service.java under a collector with
// -XX:+PreserveFramePointer: 100 requests through a try-with-resources
// span and 100 through Spanwatch.run, every 10th failed, one in ten 150 ms
// against a 100 ms budget (the others return at once). The counts are exact; the stack of each slow
// span of handleCheckout starts, below the SDK's own frames, at
// Service.handleCheckout, compiled and named from the perf map the SDK
// had the JVM write (no jcmd).
func TestService(t *testing.T) {
	sb := sdktest.NewSandbox(t)
	build(t, sb.Dir)
	w := sdktest.Start(t, []collector.BudgetRule{
		{Span: "java.checkout.*.span", Budget: 100 * time.Millisecond},
		{Span: "java.checkout.*.run", Budget: 100 * time.Millisecond},
	})
	name := fmt.Sprintf("java.checkout.%d", os.Getpid())
	cmd := java(sb, "-XX:+PreserveFramePointer", "-Dspanwatch.perfmap.interval=200", "Service", "100", name)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(out)
	first, _ := r.ReadString('\n')
	sdktest.Mode(t, first, "mode=marker", "mode=user_events")
	slow := sdktest.Finish(t, r, cmd)
	pid := cmd.Process.Pid
	w.Wait(t, pid, 15*time.Second, map[string]sdktest.Want{
		name + ".span": {Count: 100, Errors: 10, OverBudget: 10, Slow: slow[name+".span"]},
		name + ".run":  {Count: 100, Errors: 10, OverBudget: 10, Slow: slow[name+".run"]},
	})
	ovs := w.Overruns(pid, name+".span")
	if len(ovs) > 0 {
		t.Logf("a slow span's stack:%s", sdktest.Stack(ovs[0].UserStack))
	}
	for _, ov := range ovs {
		if ov.Span != name+".span" {
			continue
		}
		if top := sdktest.Top(ov, 1); len(top) == 0 || top[0] != "void Service.handleCheckout(java.lang.String, int, boolean)" {
			t.Fatalf("overrun of %s: the stack starts %v, want Service.handleCheckout:%s", ov.Span, top, sdktest.Stack(ov.UserStack))
		}
	}
}

// BenchmarkSpanCost measures what a span costs a Java program: a
// try-with-resources span beside an empty static call, and Spanwatch.run
// around a lambda beside the lambda alone, with nobody listening and with
// a collector listening through the marker.
func BenchmarkSpanCost(b *testing.B) {
	sb := sdktest.NewSandbox(b)
	build(b, sb.Dir)
	sdktest.Costs(b, func(n int) *exec.Cmd { return java(sb, "Bench", fmt.Sprint(n)) }, 50_000_000, 20_000)
}

var _ = strings.Contains
