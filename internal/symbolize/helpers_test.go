package symbolize

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/internal/userfile"
)

// lookupFile loads the ELF file at path as a module of s, with debug files
// looked for at debug (nil: nowhere), and looks addr up in it.
func lookupFile(t testing.TB, s *Symbolizer, path string, debug *debugPlace, addr uint64) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := userfile.OpenPath(ctx, path, userfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := newModule(s, f, path, fileKey{dev: f.Info.Dev, inode: f.Info.Ino})
	m.debug = debug
	defer m.close()
	var r []result
	if err := m.with(ctx, func(*tables) { r = m.lookupLocked(addr) }); err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	return r[len(r)-1]
}

// markerLines maps the "call:NAME" and "line:NAME" comments of a source
// file to their line numbers, so expected lines are read from the source.
func markerLines(t *testing.T, src string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for i, line := range strings.Split(string(b), "\n") {
		for _, kind := range []string{"call:", "line:"} {
			if j := strings.Index(line, kind); j >= 0 {
				name := strings.TrimRight(strings.Fields(line[j:])[0], "*/")
				m[name] = i + 1
			}
		}
	}
	return m
}

// startBlocked starts bin, which blocks in slow until its stdin closes,
// and waits for its "ready" line.
func startBlocked(t testing.TB, bin string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(bin)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("%s: read ready line: %q, %v", bin, line, err)
	}
	return cmd, stdin
}

func buildGo(t testing.TB, bin, src string, args ...string) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("skipping: go tool not found: %v", err)
	}
	cmdArgs := append([]string{"build", "-o", bin}, args...)
	run(t, gobin, append(cmdArgs, src)...)
}

func buildC(t testing.TB, bin, src string) {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skipf("skipping: no C compiler: %v", err)
	}
	run(t, cc, "-O0", "-g", "-fno-omit-frame-pointer", "-o", bin, src)
}

func run(t testing.TB, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) {
			t.Skipf("skipping: %s: %v", name, err)
		}
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
