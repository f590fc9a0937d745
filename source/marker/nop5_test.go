//go:build linux

package marker

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spanwatch/spanwatch/internal/markerabi"
)

// TestGoMarkerNop5 builds a program with the Go SDK for x86-64 and arm64
// and checks what Find says of its marker's five-byte nop site: there on
// x86-64, and stripped binaries too; not on arm64; and not in a binary
// whose marker is the form before the site (a nop and a return), which
// the collector must attach at its first byte.
func TestGoMarkerNop5(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: cross-builds Go programs")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nimport \"github.com/spanwatch/spanwatch/emit\"\n\nfunc main() { emit.Start(\"nop5\").End(nil) }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build := func(goarch, name string, ldflags string) string {
		out := filepath.Join(dir, name)
		cmd := exec.Command(gobin, "build", "-ldflags="+ldflags, "-o", out, src)
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+goarch, "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", name, err, b)
		}
		return out
	}
	for _, tc := range []struct {
		name, goarch, ldflags string
		nop5                  bool
	}{
		{"amd64", "amd64", "", true},
		{"amd64-stripped", "amd64", "-s -w", true},
		{"arm64", "arm64", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mk, err, _ := findMarkerIn(t, build(tc.goarch, tc.name, tc.ldflags))
			if err != nil {
				t.Fatal(err)
			}
			if mk.SysV || mk.Nop5 != tc.nop5 {
				t.Errorf("found %+v, want the Go marker with Nop5 %v", mk, tc.nop5)
			}
		})
	}
	t.Run("amd64-before-nop5", func(t *testing.T) {
		bin := build("amd64", "old", "")
		mk, err, _ := findMarkerIn(t, bin)
		if err != nil || !mk.Nop5 {
			t.Fatalf("found %+v, %v; want the Go marker with its nop5", mk, err)
		}
		// The marker as it was: nop, ret (the rest of the function is
		// padding the return never reaches).
		f, err := os.OpenFile(bin, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		code := make([]byte, len(markerabi.GoMarkerCodeAMD64))
		if _, err := f.ReadAt(code, int64(mk.Off)); err != nil {
			t.Fatal(err)
		}
		if string(code) != markerabi.GoMarkerCodeAMD64 {
			t.Fatalf("the marker at file offset %#x reads % x", mk.Off, code)
		}
		if _, err := f.WriteAt([]byte{0xc3}, int64(mk.Off+markerabi.GoNop5Offset)); err != nil {
			t.Fatal(err)
		}
		f.Close()
		old, err, _ := findMarkerIn(t, bin)
		if err != nil {
			t.Fatal(err)
		}
		if old.Nop5 || old.Off != mk.Off || old.Sem != mk.Sem {
			t.Errorf("in the old form found %+v, want %+v without Nop5", old, mk)
		}
	})
}
