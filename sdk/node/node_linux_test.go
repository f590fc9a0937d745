//go:build linux

package node

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

// nodeHeaders is where Debian's and NodeSource's nodejs packages put
// node_api.h.
const nodeHeaders = "/usr/include/node"

// setup builds the addon into dir/addon and installs the npm packages of
// pkgs/package-lock.json into dir/app, skipping where Node.js, its
// headers, npm or the registry are missing.
func setup(tb testing.TB, dir, pkgs string) {
	tb.Helper()
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		tb.Skipf("the SDK has no marker on %s", runtime.GOARCH)
	}
	sdktest.RequireTool(tb, "node", "Debian package nodejs")
	sdktest.RequireTool(tb, "npm", "Debian package npm")
	sdktest.RequireTool(tb, "gcc", "Debian package build-essential")
	if _, err := os.Stat(filepath.Join(nodeHeaders, "node_api.h")); err != nil {
		tb.Skipf("%s/node_api.h not installed (Debian package libnode-dev)", nodeHeaders)
	}
	root := sdktest.Root(tb)
	addon := filepath.Join(dir, "addon", "spanwatch.node")
	os.MkdirAll(filepath.Dir(addon), 0o755)
	args := []string{"-O2", "-g", "-std=gnu11", "-fPIC", "-shared", "-fno-omit-frame-pointer", "-Wall", "-Wextra",
		"-DNODE_GYP_MODULE_NAME=spanwatch", "-I" + nodeHeaders, "-Wl,-z,nodelete", "-pthread",
		"-o", addon, filepath.Join(root, "sdk", "node", "src", "addon.c")}
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		tb.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	app := filepath.Join(dir, "app")
	os.MkdirAll(app, 0o755)
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(pkgs, f))
		if err != nil {
			tb.Fatal(err)
		}
		os.WriteFile(filepath.Join(app, f), b, 0o644)
	}
	cache := os.Getenv("SPANWATCH_NPM_CACHE")
	if cache == "" {
		cache = filepath.Join(dir, "npm-cache")
	}
	args = []string{"ci", "--ignore-scripts", "--no-audit", "--no-fund", "--cache", cache}
	// SPANWATCH_NPM_OFFLINE=1: the cache has every package and npm must
	// not reach the registry (the VM has no network: test/vm/matrix.sh
	// fills a cache on the host and the VM sees it read-only). npm writes
	// into its cache (its index, its logs): it gets a copy.
	if os.Getenv("SPANWATCH_NPM_OFFLINE") == "1" {
		copied := filepath.Join(dir, "npm-cache")
		if out, err := exec.Command("cp", "-a", cache+"/.", copied).CombinedOutput(); err != nil {
			tb.Fatalf("copy the npm cache %s: %v\n%s", cache, err, out)
		}
		args = []string{"ci", "--ignore-scripts", "--no-audit", "--no-fund", "--offline", "--cache", copied}
	}
	cmd := exec.Command("npm", args...)
	cmd.Dir = app
	if out, err := cmd.CombinedOutput(); err != nil {
		if s := string(out); strings.Contains(s, "ENOTFOUND") || strings.Contains(s, "ETIMEDOUT") || strings.Contains(s, "EAI_AGAIN") || strings.Contains(s, "ECONNREFUSED") {
			tb.Skipf("npm registry unreachable: %s", s)
		}
		tb.Fatalf("npm ci: %v\n%s", err, out)
	}
}

// env is the environment of the test's Node.js programs: the SDK from the
// repository, its addon and the npm packages from the sandbox.
func env(tb testing.TB, sb *sdktest.Sandbox) []string {
	return append(os.Environ(),
		"SPANWATCH_NODE_SDK="+filepath.Join(sdktest.Root(tb), "sdk", "node"),
		"SPANWATCH_NODE_ADDON="+sb.Path("addon/spanwatch.node"),
		"NODE_PATH="+sb.Path("app/node_modules"))
}

// TestService runs testdata/service.js, a service instrumented with
// OpenTelemetry JS whose tracer provider has the SpanwatchSpanProcessor,
// under a collector, with V8's perf map on (--perf-basic-prof, then
// --perf-basic-prof-only-functions, each with
// --interpreted-frames-native-stack for functions not compiled yet): 100
// synchronous OpenTelemetry spans and 100 async spans through the SDK's
// span(), every 10th failed, one in ten 150 ms against a 100 ms budget (the
// others return at once). The
// counts are exact; the stack of each slow OpenTelemetry span starts,
// below the SDK's and OpenTelemetry's own frames, at handleCheckout, the
// JavaScript function that ended it.
func TestService(t *testing.T) {
	sb := sdktest.NewSandbox(t)
	setup(t, sb.Dir, "testdata")
	w := sdktest.Start(t, []collector.BudgetRule{{Span: "js.checkout.*", Budget: 100 * time.Millisecond}})
	service, err := filepath.Abs("testdata/service.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, perf := range []string{"--perf-basic-prof", "--perf-basic-prof-only-functions"} {
		t.Run(strings.TrimPrefix(perf, "--"), func(t *testing.T) {
			name := fmt.Sprintf("js.checkout.%d.%s", os.Getpid(), strings.TrimPrefix(perf, "--perf-basic-prof"))
			// --no-opt: without TurboFan nothing is deoptimized, and a
			// function deoptimized while on the stack runs on in V8's
			// generic interpreter entry, which no perf map names (seen
			// under load: its overruns lost handleCheckout's name).
			cmd := sb.Command("node", perf, "--interpreted-frames-native-stack", "--no-opt", service, "100", name)
			cmd.Env = env(t, sb)
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
				name + ".otel":  {Count: 100, Errors: 10, OverBudget: 10, Slow: slow[name+".otel"]},
				name + ".async": {Count: 100, Errors: 10, OverBudget: 10, Slow: slow[name+".async"]},
			})
			ovs := w.Overruns(pid, name+".otel")
			if len(ovs) > 0 {
				t.Logf("a slow span's stack:%s", sdktest.Stack(ovs[0].UserStack))
			}
			for _, ov := range ovs {
				if ov.Span != name+".otel" {
					continue
				}
				top := sdktest.Top(ov, 2)
				if len(top) == 0 || !strings.Contains(top[0], "handleCheckout ") || !strings.Contains(top[0], service) {
					t.Fatalf("overrun of %s: the stack starts %v, want handleCheckout in %s:%s", ov.Span, top, service, sdktest.Stack(ov.UserStack))
				}
			}
		})
	}
}

// BenchmarkSpanCost measures what a span costs a Node.js program:
// startSpan().end() beside an empty call, a traced function beside the
// same function undecorated, and an OpenTelemetry span with the
// SpanwatchSpanProcessor beside one without, with nobody listening and
// with a collector listening through the marker.
func BenchmarkSpanCost(b *testing.B) {
	sb := sdktest.NewSandbox(b)
	setup(b, sb.Dir, "testdata")
	bench, err := filepath.Abs("testdata/bench.js")
	if err != nil {
		b.Fatal(err)
	}
	sdktest.Costs(b, func(n int) *exec.Cmd {
		cmd := sb.Command("node", bench, fmt.Sprint(n))
		cmd.Env = env(b, sb)
		return cmd
	}, 5_000_000, 20_000)
}

// BenchmarkAddonVsKoffi is how the SDK's native part was chosen: a span
// handed to a listening agent through the N-API addon, and through koffi
// (an FFI from npm) over libspanwatch.so, alternately in one process
// (testdata/koffi/compare.js). Idle, both test the probe word in a typed
// array (koffi.view over spanwatch_lib_word), the same read. It installs
// koffi (84 MB with its prebuilt binaries) into a temporary directory.
func BenchmarkAddonVsKoffi(b *testing.B) {
	dir := b.TempDir()
	setup(b, dir, "testdata/koffi")
	lib := sdktest.Lib(b)
	compare, err := filepath.Abs("testdata/koffi/compare.js")
	if err != nil {
		b.Fatal(err)
	}
	w := sdktest.Start(b, nil)
	defer w.Close()
	b.ResetTimer()
	cmd := exec.Command("node", compare, "20000", filepath.Join(lib, "libspanwatch.so.1"), filepath.Join(dir, "addon", "spanwatch.node"))
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(dir, "app", "node_modules"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("compare.js: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "listening 1") {
		b.Fatalf("compare.js saw no listener:\n%s", out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		var name string
		var v float64
		if n, _ := fmt.Sscan(line, &name, &v); n == 2 && (name == "addon" || name == "koffi" || name == "koffi-call") {
			b.ReportMetric(v, "ns/"+name)
		}
	}
}

// TestNpmInstall builds the addon as its README says, with npm and
// node-gyp against the installed headers (--nodedir=/usr, nothing
// downloaded), in a copy of the repository's layout, and loads the SDK.
func TestNpmInstall(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skipf("the SDK has no marker on %s", runtime.GOARCH)
	}
	sdktest.RequireTool(t, "node", "Debian package nodejs")
	sdktest.RequireTool(t, "npm", "Debian package npm")
	if _, err := os.Stat(filepath.Join(nodeHeaders, "node_api.h")); err != nil {
		t.Skipf("%s/node_api.h not installed (Debian package libnode-dev)", nodeHeaders)
	}
	dir := t.TempDir()
	sdktest.CopyTree(t, dir, "include", "sdk/node")
	cmd := exec.Command("npm", "install", "--nodedir=/usr", "--no-audit", "--no-fund", "--cache", filepath.Join(dir, "npm-cache"))
	cmd.Dir = filepath.Join(dir, "sdk", "node")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install: %v\n%s", err, out)
	}
	cmd = exec.Command("node", "-e", "const s = require(process.argv[1]); console.log(s.mode(), s.listening())", filepath.Join(dir, "sdk", "node"))
	cmd.Env = append(os.Environ(), "SPANWATCH_EMIT=off")
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "off false\n" {
		t.Fatalf("require the SDK: %v, %q", err, out)
	}
}
