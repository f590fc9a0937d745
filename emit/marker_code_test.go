package emit

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/internal/markerabi"
)

// TestMarkerCode builds a program that uses the SDK for each architecture
// with an assembly marker and checks what the collector uprobes there
// (emit.marker.abi0): a nop first, the uprobe's site, then a return, with
// no prologue before the nop (on arm64 the assembler's NOP would emit
// nothing at all; NOOP is the instruction). On amd64 a five-byte nop, the
// site kernels that optimize uprobes on it are attached at, sits between
// the nop and the return (internal/markerabi.GoMarkerCodeAMD64).
func TestMarkerCode(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: cross-builds a program for two architectures")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(`package main

import "github.com/spanwatch/spanwatch/emit"

func main() { emit.Start("marker").End(nil) }
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		goarch  string
		machine elf.Machine
		code    []byte
	}{
		{"amd64", elf.EM_X86_64, []byte(markerabi.GoMarkerCodeAMD64)},                     // nop; nop5; ret
		{"arm64", elf.EM_AARCH64, []byte{0x1f, 0x20, 0x03, 0xd5, 0xc0, 0x03, 0x5f, 0xd6}}, // nop; ret
	} {
		t.Run(tc.goarch, func(t *testing.T) {
			bin := filepath.Join(dir, "prog-"+tc.goarch)
			cmd := exec.Command(gobin, "build", "-o", bin, src)
			cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+tc.goarch, "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build: %v\n%s", err, out)
			}
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Machine != tc.machine {
				t.Fatalf("built a %s binary, want %s", f.Machine, tc.machine)
			}
			syms, err := f.Symbols()
			if err != nil {
				t.Fatal(err)
			}
			const name = "github.com/spanwatch/spanwatch/emit.marker.abi0"
			for _, s := range syms {
				if s.Name != name {
					continue
				}
				text := f.Section(".text")
				got := make([]byte, len(tc.code))
				if _, err := text.ReadAt(got, int64(s.Value-text.Addr)); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, tc.code) {
					t.Errorf("%s starts % x, want % x (a nop, then a return; on amd64 a five-byte nop between)", name, got, tc.code)
				}
				return
			}
			t.Fatalf("no symbol %s", name)
		})
	}
}

// TestMarkerReturns calls the marker as send does, with and without an
// event: it returns and leaves the event as it was (without a uprobe it is
// a nop and a return).
func TestMarkerReturns(t *testing.T) {
	var ev event
	ev.fill("marker", time.Unix(0, 42), 1234, true)
	want := ev
	marker(&ev)
	marker(nil)
	if ev != want {
		t.Errorf("the marker changed its event: %+v, want %+v", ev, want)
	}
}
