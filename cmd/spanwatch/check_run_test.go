//go:build linux

package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/agent"
	"github.com/spanwatch/spanwatch/config"
)

// TestCheckEqualsRun gives every broken file of config/testdata/broken (at
// least 40, every section of the file) to check and to run: both fail,
// with the same problems, and run fails before it starts the agent (before
// anything is loaded into the kernel).
func TestCheckEqualsRun(t *testing.T) {
	files, err := filepath.Glob("../../config/testdata/broken/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 40 {
		t.Fatalf("only %d broken files", len(files))
	}
	started := 0
	saved := startAgent
	startAgent = func(context.Context, *config.Config, agent.Options) error { started++; return nil }
	defer func() { startAgent = saved }()
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			// check prints on os.Stdout: call what it runs.
			var checkOut bytes.Buffer
			if err := checkFiles(&checkOut, []string{f}); err == nil {
				t.Fatalf("check passed:\n%s", checkOut.String())
			}
			lines := strings.Split(strings.TrimRight(checkOut.String(), "\n"), "\n")
			if lines[0] != f+": FAILED" {
				t.Fatalf("check said %q", lines[0])
			}
			checkProblems := strings.Join(lines[1:], "\n")

			before := started
			var runOut, runErr bytes.Buffer
			if code := run([]string{"run", "--config", f}, &runOut, &runErr); code != 1 {
				t.Fatalf("run: exit %d\n%s", code, runErr.String())
			}
			if started != before {
				t.Fatal("run started the agent with a broken file")
			}
			msg := strings.TrimPrefix(strings.TrimRight(runErr.String(), "\n"), "spanwatch run: ")
			if _, rest, ok := strings.Cut(msg, " problems:\n"); ok {
				msg = rest
			} else {
				msg = "  " + msg
			}
			if msg != checkProblems {
				t.Errorf("check and run disagree\ncheck:\n%s\nrun:\n%s", checkProblems, msg)
			}
		})
	}
	// A good file passes both, and run starts the agent with it.
	good := "../../config/testdata/good/minimal.yaml"
	if err := checkFiles(&bytes.Buffer{}, []string{good}); err != nil {
		t.Errorf("check %s: %v", good, err)
	}
	if code := run([]string{"run", "--config", good}, &bytes.Buffer{}, &bytes.Buffer{}); code != 0 || started != 1 {
		t.Errorf("run %s: exit %d, agent started %d times", good, code, started)
	}
}
