//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/agent"
	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/internal/rotate"
	"github.com/spanwatch/spanwatch/snapshot"
)

// TestRunOutputAndLogFlags checks what run hands the agent for --output
// with rotation and --log-format, and that bad values stop it with a usage
// error before anything starts.
func TestRunOutputAndLogFlags(t *testing.T) {
	dir := t.TempDir()
	configPath := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(configPath, []byte("budgets:\n  - {span: x, budget: 1s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	saved := startAgent
	defer func() { startAgent = saved }()
	var got agent.Options
	startAgent = func(_ context.Context, _ *config.Config, opts agent.Options) error {
		got = opts
		if opts.Output == nil {
			return nil
		}
		// What the agent does with Output: JSON lines, then a sync.
		for i := range 50 {
			if _, err := fmt.Fprintf(opts.Output, "{\"n\":%d,\"pad\":%q}\n", i, strings.Repeat("x", 40)); err != nil {
				return err
			}
		}
		opts.Logger.Info("started", "interval", "1s")
		return opts.Output.(interface{ Sync() error }).Sync()
	}
	out := filepath.Join(dir, "snapshots.jsonl")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"run", "--config", configPath, "--output", out, "--output-max-size", "1k", "--output-keep", "2", "--log-format", "json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, stderr.String())
	}
	if _, ok := got.Output.(*rotate.File); !ok {
		t.Fatalf("Output is %T, want a rotated file", got.Output)
	}
	if got.OutputMaxLine != snapshot.DefaultMaxLine {
		t.Errorf("OutputMaxLine %d, want the default %d", got.OutputMaxLine, snapshot.DefaultMaxLine)
	}
	files, _ := filepath.Glob(out + "*")
	if len(files) != 3 { // snapshots.jsonl, .1, .2: 50 lines of 60 bytes in 1 KiB files
		t.Errorf("files %v, want the file and 2 rotated ones", files)
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if len(b) > 1024 {
			t.Errorf("%s holds %d bytes, over the 1k limit", f, len(b))
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if !json.Valid([]byte(l)) {
				t.Errorf("%s: torn line %q", f, l)
			}
		}
	}
	if !got.Logger.Handler().Enabled(context.Background(), 0) {
		t.Error("logger disabled at info")
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--output-max-size", "1k"}, "give --output FILE"},
		{[]string{"--output", out, "--output-max-size", "lots"}, "--output-max-size: bad size"},
		{[]string{"--output", out, "--output-keep", "-1"}, "--output-keep must not be negative"},
		{[]string{"--output", out, "--output-max-line", "1k"}, "--output-max-line: 1k is out of range"},
		{[]string{"--log-format", "xml"}, "want text or json"},
		{[]string{"--interval", "1x"}, "unknown unit"},
	} {
		stderr.Reset()
		args := append([]string{"run", "--config", configPath}, tc.args...)
		if code := run(args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("spanwatch %s: exit %d, %q; want 2 and %q", strings.Join(args, " "), code, stderr.String(), tc.want)
		}
	}
	// One duration syntax on the command line too: 1d is a day.
	if code := run([]string{"run", "--config", configPath, "--interval", "1d"}, &stdout, &stderr); code != 0 {
		t.Errorf("--interval 1d: exit %d\n%s", code, stderr.String())
	}
}
