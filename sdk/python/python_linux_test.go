//go:build linux

package python

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

// python is Debian's CPython 3.11: the one the SDK is tested with (a
// pyenv python earlier on PATH is not Debian's).
const python = "/usr/bin/python3.11"

func TestMain(m *testing.M) {
	code := m.Run()
	sdktest.Cleanup()
	os.Exit(code)
}

// build builds the package (spanwatch/ and its extension) with setup.py
// into dir/lib, skipping where Debian's python3.11 or its headers are
// missing.
func build(tb testing.TB, dir string) string {
	tb.Helper()
	if runtime.GOARCH != "amd64" {
		tb.Skip("the SDK's Python frames, which these tests check, are x86-64 only")
	}
	if _, err := os.Stat(python); err != nil {
		tb.Skipf("%s not installed (Debian package python3.11)", python)
	}
	if _, err := os.Stat("/usr/include/python3.11/Python.h"); err != nil {
		tb.Skip("Python.h not installed (Debian package python3.11-dev)")
	}
	sdktest.RequireTool(tb, "gcc", "Debian package build-essential")
	lib := filepath.Join(dir, "lib")
	cmd := exec.Command(python, "setup.py", "-q", "build_py", "--build-lib", lib,
		"build_ext", "--build-lib", lib, "--build-temp", filepath.Join(dir, "tmp"))
	if out, err := cmd.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "No module named 'setuptools'") {
			tb.Skip("setuptools not installed for python3.11 (Debian package python3-setuptools)")
		}
		tb.Fatalf("setup.py build: %v\n%s", err, out)
	}
	return lib
}

// TestService runs testdata/service.py under a collector: 100 requests
// through a `with spanwatch.span()` block and 100 through a
// @spanwatch.traced function, every 10th raising, one in ten 150 ms in
// charge_card against a 100 ms budget (the others return at once). The counts are exact; each slow
// span's stack starts, below the SDK's own frames, at the Python function
// that ended it: handle_checkout for the with block, process_payment for
// the traced function, then their callers.
func TestService(t *testing.T) {
	sb := sdktest.NewSandbox(t)
	build(t, sb.Dir)
	w := sdktest.Start(t, []collector.BudgetRule{{Span: "py.checkout.*", Budget: 100 * time.Millisecond}})
	name := fmt.Sprintf("py.checkout.%d", os.Getpid())
	service, err := filepath.Abs("testdata/service.py")
	if err != nil {
		t.Fatal(err)
	}
	cmd := sb.Command(python, service, "100", name)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+sb.Path("lib"), "PYTHONDONTWRITEBYTECODE=1")
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
		name + ".with":   {Count: 100, Errors: 10, OverBudget: 10, Slow: slow[name+".with"]},
		name + ".traced": {Count: 100, Errors: 10, OverBudget: 10, Slow: slow[name+".traced"]},
	})
	for span, want := range map[string][]string{
		name + ".with":   {"py::handle_checkout:" + service, "py::main:" + service, "py::<module>:" + service},
		name + ".traced": {"py::make_payment.<locals>.process_payment:" + service, "py::main:" + service, "py::<module>:" + service},
	} {
		ovs := w.Overruns(pid, span)
		if len(ovs) > 0 {
			t.Logf("%s: a slow span's stack:%s", span, sdktest.Stack(ovs[0].UserStack))
		}
		for _, ov := range ovs {
			if ov.Span != span {
				continue
			}
			if top := sdktest.Top(ov, len(want)); strings.Join(top, "|") != strings.Join(want, "|") {
				t.Fatalf("overrun of %s: the stack starts %v, want %v:%s", span, top, want, sdktest.Stack(ov.UserStack))
			}
		}
	}
}

// BenchmarkSpanCost measures what a span costs a Python program: a `with
// spanwatch.span()` block beside an empty function call, and a call of a
// @spanwatch.traced function beside the same function undecorated, with
// nobody listening and with a collector listening through the marker.
func BenchmarkSpanCost(b *testing.B) {
	sb := sdktest.NewSandbox(b)
	build(b, sb.Dir)
	bench, err := filepath.Abs("testdata/bench.py")
	if err != nil {
		b.Fatal(err)
	}
	sdktest.Costs(b, func(n int) *exec.Cmd {
		cmd := sb.Command(python, bench, fmt.Sprint(n))
		cmd.Env = append(os.Environ(), "PYTHONPATH="+sb.Path("lib"), "PYTHONDONTWRITEBYTECODE=1")
		return cmd
	}, 2_000_000, 20_000)
}

// TestPipInstall installs the package as its README says, with Debian's
// pip and nothing from the network (--no-index, --no-build-isolation: the
// system's setuptools), from a copy of the repository's layout, and
// imports it.
func TestPipInstall(t *testing.T) {
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s not installed (Debian package python3.11)", python)
	}
	if err := exec.Command(python, "-m", "pip", "--version").Run(); err != nil {
		t.Skip("pip not installed for python3.11 (Debian package python3-pip)")
	}
	if _, err := os.Stat("/usr/include/python3.11/Python.h"); err != nil {
		t.Skip("Python.h not installed (Debian package python3.11-dev)")
	}
	dir := t.TempDir()
	sdktest.CopyTree(t, dir, "include", "sdk/python")
	site := filepath.Join(dir, "site")
	cmd := exec.Command(python, "-m", "pip", "install", "--quiet", "--no-index", "--no-build-isolation",
		"--disable-pip-version-check", "--target", site, "./sdk/python")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pip install: %v\n%s", err, out)
	}
	cmd = exec.Command(python, "-c", "import spanwatch; print(spanwatch.mode())")
	cmd.Dir = site
	cmd.Env = append(os.Environ(), "PYTHONPATH="+site, "SPANWATCH_EMIT=off")
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "off\n" {
		t.Fatalf("import spanwatch: %v, %q", err, out)
	}
}

// BenchmarkFramesCost measures what putting Python frames into stacks
// costs a span while an agent listens: testdata/bench.py under one
// collector with SPANWATCH_PYTHON_FRAMES unset (on) and =0 (off).
func BenchmarkFramesCost(b *testing.B) {
	sb := sdktest.NewSandbox(b)
	build(b, sb.Dir)
	bench, err := filepath.Abs("testdata/bench.py")
	if err != nil {
		b.Fatal(err)
	}
	w := sdktest.Start(b, nil)
	defer w.Close()
	b.ResetTimer()
	for _, frames := range []string{"1", "0"} {
		cmd := sb.Command(python, bench, "20000")
		cmd.Env = append(os.Environ(), "PYTHONPATH="+sb.Path("lib"), "PYTHONDONTWRITEBYTECODE=1",
			"SPANWATCH_BENCH_WAIT=1", "SPANWATCH_PYTHON_FRAMES="+frames)
		out, err := cmd.Output()
		if err != nil || !strings.Contains(string(out), "listening 1") {
			b.Fatalf("bench.py: %v\n%s", err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			var name string
			var v float64
			if n, _ := fmt.Sscan(line, &name, &v); n == 2 && (name == "span" || name == "traced") {
				b.ReportMetric(v, "ns/"+name+"-frames"+frames)
			}
		}
	}
}
