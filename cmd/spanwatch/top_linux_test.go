//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/emit"
)

// TestTopSortFilterJSONLogs runs the built top over spans this test
// process emits (it links the span SDK: top uprobes its marker), with
// --sort, --filter and --log-format json, and checks the table holds only
// the filtered spans in p99 order, with the process column, and that every
// log line on stderr is a JSON object.
func TestTopSortFilterJSONLogs(t *testing.T) {
	requireRoot(t)
	if emit.Mode() != "marker" {
		t.Skipf("the span SDK uses %s here, not the marker", emit.Mode())
	}
	bin := buildSpanwatch(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			emit.Record(&emit.Finished{Name: "topflags.fast", Duration: time.Millisecond})
			emit.Record(&emit.Finished{Name: "topflags.slow", Duration: 50 * time.Millisecond})
			emit.Record(&emit.Finished{Name: "other.span", Duration: time.Second})
			time.Sleep(time.Millisecond)
		}
	}()
	cmd := exec.CommandContext(ctx, bin, "top", "-n", "3", "--interval", "500ms", "--source", "marker", "--binary", exe,
		"--sort", "p99", "--filter", "topflags.*", "--log-format", "json", "-v")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("top: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	screens := strings.Split(stdout.String(), "spanwatch top —")
	last := screens[len(screens)-1]
	var rows []string
	for _, l := range strings.Split(last, "\n") {
		if f := strings.Fields(l); len(f) > 3 && strings.HasPrefix(f[0], "topflags.") {
			rows = append(rows, f[0])
		}
	}
	// The process column may say "-" in the first screens: this test runs
	// in a cgroup with other executables, whose series are kept per
	// process from the first read on (TestTopFilterProcess).
	if got := strings.Join(rows, ","); got != "topflags.slow,topflags.fast" || !strings.Contains(last, "PROCESS") {
		t.Errorf("rows %q, want topflags.slow then topflags.fast under a PROCESS column:\n%s", got, last)
	}
	if strings.Contains(stdout.String(), "other.span") {
		t.Errorf("the filter let other.span through:\n%s", last)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatal("no log lines")
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil || m["msg"] == nil || m["level"] == nil {
			t.Errorf("log line is not a slog JSON object: %q", l)
		}
	}
}

// TestTopFilterProcess runs the built top over spans this test process
// emits, filtered by --filter process=THIS_EXECUTABLE: its cgroup runs
// other executables too (top itself, at least), so the kernel keeps the
// cgroup's series per process once top has read it, and the filter finds
// this process's series, named after it; a filter naming another
// executable finds none of them.
func TestTopFilterProcess(t *testing.T) {
	requireRoot(t)
	if emit.Mode() != "marker" {
		t.Skipf("the span SDK uses %s here, not the marker", emit.Mode())
	}
	bin := buildSpanwatch(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(exe)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			emit.Record(&emit.Finished{Name: "topproc.work", Duration: time.Millisecond})
			time.Sleep(time.Millisecond)
		}
	}()
	for _, tc := range []struct {
		filter string
		want   bool
	}{
		{"process=" + name + ",topproc.*", true},
		{"process=not-" + name + ",topproc.*", false},
	} {
		cmd := exec.CommandContext(ctx, bin, "top", "-n", "4", "--interval", "500ms", "--source", "marker", "--binary", exe,
			"--filter", tc.filter)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("top: %v\n%s\n%s", err, stdout.String(), stderr.String())
		}
		screens := strings.Split(stdout.String(), "spanwatch top —")
		last := screens[len(screens)-1]
		var rows []string
		for _, l := range strings.Split(last, "\n") {
			if f := strings.Fields(l); len(f) > 3 && f[0] == "topproc.work" {
				rows = append(rows, f[1])
			}
		}
		switch {
		case tc.want && (len(rows) != 1 || rows[0] != name):
			t.Errorf("--filter %s: rows with process %q, want one with %q:\n%s", tc.filter, rows, name, last)
		case !tc.want && len(rows) != 0:
			t.Errorf("--filter %s: rows with process %q, want none:\n%s", tc.filter, rows, last)
		}
	}
}
