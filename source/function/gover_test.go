package function

import (
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/internal/funcs"
)

// TestGoTraceable: Go binaries without the register ABI (before Go 1.17),
// or before Go 1.18 on arm64, or of unknown version, are refused with the
// reason.
func TestGoTraceable(t *testing.T) {
	for _, tc := range []struct {
		arch    funcs.Arch
		version string
		want    string // "" when traceable
	}{
		{funcs.ArchAMD64, "go1.19.8", ""},
		{funcs.ArchAMD64, "go1.17", ""},
		{funcs.ArchAMD64, "go1.26.8", ""},
		{funcs.ArchAMD64, "devel go1.27-abcdef Tue Jan 5 2027", ""},
		{funcs.ArchAMD64, "go1.16.15", "Go 1.17 or later"},
		{funcs.ArchAMD64, "go1.12", "Go 1.17 or later"},
		{funcs.ArchAMD64, "", "without readable build information"},
		{funcs.ArchAMD64, "gccgo", "not a Go version this reads"},
		{funcs.ArchARM64, "go1.22.1", ""},
		{funcs.ArchARM64, "go1.18", ""},
		{funcs.ArchARM64, "go1.17.13", "Go 1.18 or later on arm64"},
		{funcs.ArchARM64, "", "1.18 or later on arm64"},
	} {
		err := goTraceable(&funcs.File{Arch: tc.arch, Go: true, GoVersion: tc.version})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %q: %v, want traceable", tc.arch, tc.version, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %q: %v, want an error with %q", tc.arch, tc.version, err, tc.want)
		}
	}
}
