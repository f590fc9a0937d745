package usdt

import (
	"path/filepath"
	"runtime"
	"testing"

	"github.com/spanwatch/spanwatch/internal/bpftest"
)

// sdtBuild is the test program built at one optimization level, and the
// shared library it links.
type sdtBuild struct {
	Prog, Lib string
}

// requireSDT builds testdata/sdtprog.c (+ sdtsem.c, sdtnop5.c,
// libsdtlib.so) at -O0, -O2 and -O2 without PIE (bpftest.CProgram: the
// list in test/vm/cprograms.txt), or skips when gcc or sys/sdt.h is
// missing.
func requireSDT(t testing.TB) map[string]sdtBuild {
	t.Helper()
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("the test programs' assembly probes are written for x86-64 and arm64")
	}
	builds := map[string]sdtBuild{}
	// O2-nopie is a non-PIE executable (ET_EXEC): loaded at its
	// link-time addresses in every process.
	for _, o := range []string{"O0", "O2", "O2-nopie"} {
		prog := bpftest.CProgram(t, "sdtprog-"+o)
		builds[o] = sdtBuild{Prog: prog, Lib: filepath.Join(filepath.Dir(prog), "libsdtlib.so")}
	}
	return builds
}
