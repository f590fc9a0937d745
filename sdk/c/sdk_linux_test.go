//go:build linux

package libspanwatch

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

// TestService runs testdata/service.c, built three ways, under a
// collector: 100 requests, every 10th an error, one in ten 150 ms in
// charge_card against a 100 ms budget (the others return at once). Each build's spans arrive exactly,
// and the stack of every slow one starts, below libspanwatch's own frames,
// at handle_checkout, the function that ended the span, also in the build
// without frame pointers (the header calls the marker through a stub that
// makes a frame, from the function itself).
func TestService(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skipf("libspanwatch has no marker on %s", runtime.GOARCH)
	}
	lib := sdktest.Lib(t)
	root := sdktest.Root(t)
	dir := t.TempDir()
	src := filepath.Join(root, "sdk", "c", "testdata", "service.c")
	builds := []struct {
		name string
		args []string
	}{
		// As a distribution builds a program: no frame pointers.
		{"header", []string{"-O2", "-I" + filepath.Join(root, "include"), src}},
		{"shared", []string{"-O2", "-g", "-fno-omit-frame-pointer", "-DUSE_LIB", "-I" + filepath.Join(root, "sdk", "c"), src, "-L" + lib, "-lspanwatch", "-Wl,-rpath," + lib}},
		{"static", []string{"-O2", "-g", "-fno-omit-frame-pointer", "-DUSE_LIB", "-I" + filepath.Join(root, "sdk", "c"), src, filepath.Join(lib, "libspanwatch.a"), "-pthread"}},
	}
	w := sdktest.Start(t, []collector.BudgetRule{{Span: "c.checkout.*", Budget: 100 * time.Millisecond}})
	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			bin := filepath.Join(dir, "service-"+b.name)
			args := append([]string{"-Wall", "-o", bin}, b.args...)
			if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
				t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			name := fmt.Sprintf("c.checkout.%s.%d", b.name, os.Getpid())
			cmd := exec.Command(bin, "100", name)
			out, _ := cmd.StdoutPipe()
			in, _ := cmd.StdinPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			r := bufio.NewReader(out)
			first, _ := r.ReadString('\n')
			if !sdktest.Mode(t, first, "mode=1", "mode=2") {
				w.Release(t, cmd.Process.Pid, in, 10*time.Second)
			} else {
				in.Close() // user_events: no marker uprobe to wait for
			}
			slow := sdktest.Finish(t, r, cmd)
			w.Wait(t, cmd.Process.Pid, 10*time.Second, map[string]sdktest.Want{name: {Count: 100, Errors: 10, OverBudget: 10, Slow: slow[name]}})
			ovs := w.Overruns(cmd.Process.Pid, name)
			if len(ovs) > 0 {
				t.Logf("%s: a slow span's stack:%s", name, sdktest.Stack(ovs[0].UserStack))
			}
			for _, ov := range ovs {
				// GCC moves the unlikely part of a function, where the
				// span is sent while someone listens, to FUNC.cold.
				if top := sdktest.Top(ov, 1); len(top) == 0 || strings.TrimSuffix(top[0], ".cold") != "handle_checkout" {
					t.Fatalf("overrun of %s: the stack starts at %v, want handle_checkout:%s", name, top, sdktest.Stack(ov.UserStack))
				}
			}
		})
	}
}

// BenchmarkSpanCost measures what a span costs a C program (begin and end
// through include/spanwatch.h, gcc -O2): with nobody listening, beside an
// empty function call, and with a collector listening through the marker.
func BenchmarkSpanCost(b *testing.B) {
	root := sdktest.Root(b)
	bin := filepath.Join(b.TempDir(), "bench")
	if out, err := exec.Command("gcc", "-O2", "-I"+filepath.Join(root, "include"), "-o", bin, filepath.Join(root, "sdk", "c", "testdata", "bench.c")).CombinedOutput(); err != nil {
		b.Fatalf("gcc: %v\n%s", err, out)
	}
	sdktest.Costs(b, func(n int) *exec.Cmd { return exec.Command(bin, fmt.Sprint(n)) }, 20_000_000, 20_000)
}
