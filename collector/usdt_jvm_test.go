//go:build linux

package collector

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/internal/usdt"
	usdtsource "github.com/spanwatch/spanwatch/source/usdt"
)

// callsJava calls three methods a known number of times once told to
// (two of them named alpha, in two classes), then says done.
const callsJava = `import java.io.*;

public class Calls {
    static int alpha(int i) { return i * 31 + 7; }
    static int beta(int i) { return i ^ 5; }
    public static void main(String[] a) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("ready");
        in.readLine();
        int x = 0;
        for (int i = 0; i < 5000; i++) x += alpha(i);
        for (int i = 0; i < 3000; i++) x += Other.alpha(i);
        for (int i = 0; i < 700; i++) x += beta(i);
        System.out.println("done " + x);
        in.readLine();
    }
}

class Other {
    static int alpha(int i) { return i + 1; }
}
`

// jvmMethodName is what a JVM method span is named: the class's internal
// name (slashes; hidden classes with a /0x... suffix; arrays), a dot, and
// the method's name. Anything else (trailing bytes of a string read past
// its length) is garbage.
var jvmMethodName = regexp.MustCompile(`^[A-Za-z0-9_$/+\[;]+\.(<init>|<clinit>|[A-Za-z0-9_$]+)$`)

// TestUSDTJVMMethodNames attaches Debian's OpenJDK 17's method probes
// (hotspot:method__entry and method__return, which pass the class and the
// method as pointer and length, never NUL-terminated) to a JVM started
// with -XX:+ExtendedDTraceProbes, naming spans by both strings:
// name_args [{ptr: 1, len: 2}, {ptr: 3, len: 4}]. Each method's spans
// must come out as Class.method with the JVM's exact call count, one
// series per class for methods of the same name, and no name may carry
// bytes past its length.
func TestUSDTJVMMethodNames(t *testing.T) {
	libjvm := filepath.Join(jvm17, "lib/server/libjvm.so")
	java := filepath.Join(jvm17, "bin/java")
	javac := filepath.Join(jvm17, "bin/javac")
	for _, p := range []string{libjvm, java, javac} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("no %s: install openjdk-17-jdk-headless", p)
		}
	}
	requireBPF(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Calls.java"), []byte(callsJava), 0o644); err != nil {
		t.Fatal(err)
	}
	// Compiled first, probes off: javac under the probes takes minutes.
	if out, err := exec.Command(javac, "-d", dir, filepath.Join(dir, "Calls.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	c, err := New(context.Background(), Config{Sources: Sources{Marker: true}, ScanInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	cmd := exec.Command(java, "-XX:+ExtendedDTraceProbes", "-cp", dir, "Calls")
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	out := bufio.NewScanner(stdout)
	if !out.Scan() || out.Text() != "ready" {
		t.Fatalf("java said %q, want ready", out.Text())
	}
	// Attached to this JVM only, once it waits in main: its start-up
	// (thousands of methods) runs without traps.
	tr, err := usdtsource.Attach(context.Background(), c.SourceCore(), []usdt.SpanSource{{
		PID: cmd.Process.Pid, Binary: libjvm, NameArg: -1, KeyArg: -1, StatusArg: -1, DurationArg: -1, ValueArg: -1,
		NameArgs: []usdt.StrArg{{Ptr: 1, Len: 2}, {Ptr: 3, Len: 4}}, NameSeparator: ".",
		Start: usdt.ProbeRef{Provider: "hotspot", Name: "method__entry"},
		End:   usdt.ProbeRef{Provider: "hotspot", Name: "method__return"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	start := time.Now()
	io.WriteString(stdin, "go\n")
	if !out.Scan() {
		t.Fatalf("java ended: %v", out.Err())
	}
	t.Logf("java: %s in %v", out.Text(), time.Since(start).Round(time.Millisecond))
	s, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	series := seriesByName(s)
	for name, want := range map[string]uint64{"Calls.alpha": 5000, "Other.alpha": 3000, "Calls.beta": 700} {
		if got := series[name].Count; got != want {
			t.Errorf("%s: %d spans, want %d", name, got, want)
		}
	}
	bad := 0
	for name := range series {
		if !jvmMethodName.MatchString(name) {
			if bad++; bad <= 10 {
				t.Errorf("span name %q is not Class.method", name)
			}
		}
	}
	t.Logf("%d series, %d names not Class.method", len(series), bad)
}
