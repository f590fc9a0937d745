package usdt

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// sdtBuild is the test program built at one optimization level, and the
// shared library it links.
type sdtBuild struct {
	Prog, Lib string
}

var (
	buildOnce   sync.Once
	builds      map[string]sdtBuild
	buildErr    string
	buildBroken bool // buildErr is a failed build, not a missing tool
	buildDir    string
)

// requireSDT builds testdata/sdtprog.c (+ sdtsem.c, sdtnop5.c,
// libsdtlib.so) at -O0, -O2 and -O2 without PIE once per test binary, or
// skips when cc or sys/sdt.h is missing.
func requireSDT(t testing.TB) map[string]sdtBuild {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skip("the test programs' probes are written for x86-64")
	}
	buildOnce.Do(func() {
		cc, err := exec.LookPath("cc")
		if err != nil {
			buildErr = "no C compiler (cc) on PATH: install build-essential"
			return
		}
		if _, err := os.Stat("/usr/include/x86_64-linux-gnu/sys/sdt.h"); err != nil {
			if _, err := os.Stat("/usr/include/sys/sdt.h"); err != nil {
				buildErr = "no sys/sdt.h: install systemtap-sdt-dev"
				return
			}
		}
		// From here on the tools are there: a failure is the test's.
		buildBroken = true
		dir, err := os.MkdirTemp("", "usdt-test-")
		if err != nil {
			buildErr = err.Error()
			return
		}
		buildDir = dir
		src, _ := filepath.Abs("testdata")
		lib := filepath.Join(dir, "libsdtlib.so")
		run := func(args ...string) bool {
			out, err := exec.Command(cc, args...).CombinedOutput()
			if err != nil {
				buildErr = "cc " + filepath.Base(args[len(args)-1]) + ": " + err.Error() + ": " + string(out)
				return false
			}
			return true
		}
		if !run("-O2", "-g", "-fPIC", "-shared", "-o", lib, filepath.Join(src, "sdtlib.c")) {
			return
		}
		builds = map[string]sdtBuild{}
		// O2-nopie is a non-PIE executable (ET_EXEC): loaded at its
		// link-time addresses in every process.
		for o, flags := range map[string][]string{"O0": {"-O0"}, "O2": {"-O2"}, "O2-nopie": {"-O2", "-fno-pie", "-no-pie"}} {
			prog := filepath.Join(dir, "sdtprog-"+o)
			args := append(flags, "-g", "-o", prog, filepath.Join(src, "sdtprog.c"), filepath.Join(src, "sdtsem.c"), filepath.Join(src, "sdtnop5.c"),
				"-L"+dir, "-lsdtlib", "-Wl,-rpath,"+dir)
			if !run(args...) {
				return
			}
			builds[o] = sdtBuild{Prog: prog, Lib: lib}
		}
	})
	if buildErr != "" {
		if buildBroken {
			t.Fatal(buildErr)
		}
		t.Skip(buildErr)
	}
	return builds
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}
