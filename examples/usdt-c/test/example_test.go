package usdtc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/internal/usdt"
)

// build builds ../server.c with the example's Makefile into dir, next to a
// copy of spanwatch.yaml (whose binary paths are relative to it), and
// returns the config's path.
func build(t *testing.T, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed (Debian package build-essential)")
	}
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no C compiler (Debian package build-essential)")
	}
	if _, err := os.Stat("/usr/include/x86_64-linux-gnu/sys/sdt.h"); err != nil {
		if _, err := os.Stat("/usr/include/sys/sdt.h"); err != nil {
			t.Skip("no sys/sdt.h (Debian package systemtap-sdt-dev)")
		}
	}
	if out, err := exec.Command("make", "-s", "-C", "..", "OUT="+filepath.Join(dir, "server"), "CFLAGS=-O2 -g -fno-omit-frame-pointer -Wall -Wextra -Werror").CombinedOutput(); err != nil {
		t.Fatalf("make: %v\n%s", err, out)
	}
	cfg, err := os.ReadFile("../spanwatch.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "spanwatch.yaml")
	if err := os.WriteFile(p, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBuildsAndRuns(t *testing.T) {
	dir := t.TempDir()
	build(t, dir)
	out, err := exec.Command(filepath.Join(dir, "server"), "-n", "60", "-i", "0").CombinedOutput()
	if err != nil {
		t.Fatalf("server: %v\n%s", err, out)
	}
	if want := "handled 60 requests (20 checkouts, 40 searches), 4 failed\n"; string(out) != want {
		t.Fatalf("server printed %q, want %q", out, want)
	}
}

// TestConfigMatchesBinary parses spanwatch.yaml with spanwatch's own
// parsers and checks every probe it names against the built binary's
// .note.stapsdt, with the arguments it reads.
func TestConfigMatchesBinary(t *testing.T) {
	dir := t.TempDir()
	cfgPath := build(t, dir)
	cfg, err := config.Load(cfgPath, config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srcs := cfg.Sources
	if len(srcs) != 2 {
		t.Fatalf("%d usdt sources, want 2", len(srcs))
	}
	for _, s := range srcs {
		if s.Binary != filepath.Join(dir, "server") {
			t.Errorf("%s: binary %s, want the server next to the config", s.Describe(), s.Binary)
		}
		f, err := usdt.Open(s.Binary)
		if err != nil {
			t.Fatal(err)
		}
		type use struct {
			ref  usdt.ProbeRef
			args []int
		}
		var uses []use
		if s.Paired() {
			uses = []use{{s.Start, []int{s.KeyArg, s.NameArg}}, {s.End, []int{s.KeyArg, s.StatusArg}}}
		} else {
			uses = []use{{s.Probe, []int{s.DurationArg, s.StatusArg}}}
		}
		for _, u := range uses {
			ps := f.Lookup(u.ref.Provider, u.ref.Name)
			if len(ps) == 0 {
				t.Errorf("%s: the binary has no probe %s", s.Describe(), u.ref)
				continue
			}
			for _, a := range u.args {
				if a >= len(ps[0].Args) {
					t.Errorf("%s: probe %s has %d arguments, the config reads argument %d", s.Describe(), u.ref, len(ps[0].Args), a)
				}
			}
		}
	}
	if b, ok := cfg.Rules.BudgetFor("/checkout"); !ok || b.Milliseconds() >= 80 {
		t.Errorf("/checkout budget %v: the 80 ms slow path must exceed it", b)
	}
	// A typo in the config is caught with its position.
	bad := strings.Replace(string(mustRead(t, cfgPath)), "key_arg: 0", "key_ark: 0", 1)
	_, err = config.Parse(cfgPath, []byte(bad), config.LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), "key_ark") {
		t.Errorf("misspelt key accepted: %v", err)
	}
}

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
