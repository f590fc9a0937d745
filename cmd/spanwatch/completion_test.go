package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBashCompletion loads the generated script into a real bash and asks
// it to complete, the way bash does at a Tab: COMP_WORDS, COMP_CWORD,
// then _spanwatch, whose COMPREPLY is the answer.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	var script bytes.Buffer
	if err := writeBashCompletion(&script); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "spanwatch.bash"), script.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"spanwatch", "ru"}, "run"},
		{[]string{"spanwatch", "t"}, "test top"},
		{[]string{"spanwatch", "--v"}, "--version"},
		{[]string{"spanwatch", "run", "--con"}, "--config"},
		{[]string{"spanwatch", "run", "--metrics-a"}, "--metrics-addr"},
		{[]string{"spanwatch", "run", "--source", ""}, "user_events marker"},
		{[]string{"spanwatch", "run", "--config", "rul"}, "rules.yaml"},
		{[]string{"spanwatch", "run", "--interval", ""}, ""},
		{[]string{"spanwatch", "stacks", "--format", "p"}, "pprof"},
		{[]string{"spanwatch", "notify", ""}, "test"},
		{[]string{"spanwatch", "notify", "test", "--web"}, "--webhook"},
		{[]string{"spanwatch", "completion", ""}, "bash zsh"},
		{[]string{"spanwatch", "check", "rul"}, "rules.yaml"},
		{[]string{"spanwatch", "help", "pro"}, "probes"},
		{[]string{"spanwatch", "top", "--sor"}, "--sort"},
		{[]string{"spanwatch", "top", "--sort", "p9"}, "p90 p99"},
	} {
		cmd := exec.Command(bash, "--norc", "-c", `source ./spanwatch.bash
COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=()
_spanwatch
echo "${COMPREPLY[*]}"`, "bash")
		cmd.Args = append(cmd.Args, tc.words...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.words, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("complete %q = %q, want %q", strings.Join(tc.words, " "), got, tc.want)
		}
	}
}

// TestZshCompletion loads the generated script into a real zsh with its
// completion system and checks that it defines _spanwatch and binds it to
// spanwatch (zsh's completion widgets cannot run without a terminal).
func TestZshCompletion(t *testing.T) {
	zsh, err := exec.LookPath("zsh")
	if err != nil {
		t.Skip("no zsh: install Debian's zsh package (.ci/install-deps.sh does)")
	}
	var script bytes.Buffer
	if err := writeZshCompletion(&script); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "_spanwatch")
	if err := os.WriteFile(f, script.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(zsh, "-n", f).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v\n%s", err, out)
	}
	// compinit -D writes no dump file. (With -d PATH it writes the dump to a
	// temporary file and renames it over PATH: as root, -d /dev/null once
	// replaced the null device with a regular file.)
	out, err := exec.Command(zsh, "-f", "-c", `autoload -Uz compinit && compinit -u -D && source "$1" && print -r -- $_comps[spanwatch] && whence -w _spanwatch`, "zsh", f).CombinedOutput()
	if err != nil {
		t.Fatalf("zsh: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "_spanwatch\n_spanwatch: function" {
		t.Errorf("zsh says %q, want _spanwatch bound to spanwatch and defined as a function", got)
	}
	for _, want := range []string{"'run:collect spans", "'--metrics-addr[", ":source:(user_events marker)", "'1:argument:(bash zsh)'"} {
		if !strings.Contains(script.String(), want) {
			t.Errorf("zsh script lacks %q", want)
		}
	}
}
