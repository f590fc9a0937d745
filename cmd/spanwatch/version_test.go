package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestVersionStamped builds spanwatch with the -ldflags the README
// documents and checks that --version and the version command print the
// stamped version and revision.
func TestVersionStamped(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "spanwatch")
	const pkg = "github.com/spanwatch/spanwatch/internal/buildinfo"
	ldflags := "-X " + pkg + ".version=v1.2.3-test -X " + pkg + ".revision=0123456789abcdef0123456789abcdef01234567"
	if out, err := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	want := regexp.MustCompile(`^spanwatch v1\.2\.3-test \(revision 0123456789abcdef0123456789abcdef01234567, go1\.[0-9.]+, [a-z0-9]+/[a-z0-9]+\)\n$`)
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		out, err := exec.Command(bin, args...).Output()
		if err != nil || !want.Match(out) {
			t.Errorf("spanwatch %s = %q, %v; want %s", strings.Join(args, " "), out, err, want)
		}
	}
}

// TestHelpExitsZero asks every command, and "notify test", for its help:
// each prints it and exits 0.
func TestHelpExitsZero(t *testing.T) {
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	cases := [][]string{{"notify", "test", "--help"}, {"notify", "test", "-h"}, {"--help"}, {"help"}}
	for _, n := range names {
		cases = append(cases, []string{n, "--help"}, []string{"help", n})
	}
	for _, args := range cases {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Errorf("spanwatch %s: exit %d, want 0\n%s", strings.Join(args, " "), code, stderr.String())
		}
		if !strings.Contains(stdout.String()+stderr.String(), "Usage: spanwatch") {
			t.Errorf("spanwatch %s printed no usage", strings.Join(args, " "))
		}
	}
}
