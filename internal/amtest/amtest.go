// Package amtest starts a real Alertmanager for tests: Debian's
// prometheus-alertmanager (or the binary named by $SPANWATCH_ALERTMANAGER),
// on a free loopback port, with a temporary configuration and storage
// directory, clustering off.
package amtest

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// DefaultBinary is where Debian's prometheus-alertmanager package installs
// Alertmanager.
const DefaultBinary = "/usr/bin/prometheus-alertmanager"

// Alertmanager is a running Alertmanager process.
type Alertmanager struct {
	// URL is its base URL, e.g. http://127.0.0.1:40123.
	URL     string
	cmd     *exec.Cmd
	out     *syncBuffer
	done    chan struct{} // closed when the process has exited
	waitErr error
}

// Binary returns the Alertmanager binary to run, or "" when there is none.
func Binary() string {
	if p := os.Getenv("SPANWATCH_ALERTMANAGER"); p != "" {
		return p
	}
	if _, err := os.Stat(DefaultBinary); err == nil {
		return DefaultBinary
	}
	if p, err := exec.LookPath("alertmanager"); err == nil {
		return p
	}
	return ""
}

// Start runs Alertmanager with config (alertmanager.yml text) and stops it
// when the test ends. It skips the test when no Alertmanager is installed.
func Start(t testing.TB, config string) *Alertmanager {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Skip("no Alertmanager: install Debian's prometheus-alertmanager or set SPANWATCH_ALERTMANAGER")
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for range 3 { // the free port may be taken between probe and bind
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		am := &Alertmanager{URL: fmt.Sprintf("http://127.0.0.1:%d", port), out: &syncBuffer{}}
		am.cmd = exec.Command(bin,
			"--config.file="+cfg,
			"--storage.path="+filepath.Join(dir, "data"),
			fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port),
			"--cluster.listen-address=", // no gossip: a single instance
			"--log.level=debug",
		)
		am.cmd.Stdout, am.cmd.Stderr = am.out, am.out
		if err := am.cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", bin, err)
		}
		am.done = make(chan struct{})
		go func() { am.waitErr = am.cmd.Wait(); close(am.done) }()
		if lastErr = am.waitReady(15 * time.Second); lastErr == nil {
			t.Cleanup(func() {
				am.stop()
				if t.Failed() {
					t.Logf("alertmanager output:\n%s", am.out.String())
				}
			})
			return am
		}
		am.stop()
		lastErr = fmt.Errorf("%w\n%s", lastErr, am.out.String())
	}
	t.Fatalf("alertmanager did not become ready: %v", lastErr)
	return nil
}

// Output returns what Alertmanager logged so far.
func (am *Alertmanager) Output() string { return am.out.String() }

func (am *Alertmanager) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-am.done:
			return fmt.Errorf("alertmanager exited: %v", am.waitErr)
		default:
		}
		resp, err := http.Get(am.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %s", timeout)
}

func (am *Alertmanager) stop() {
	am.cmd.Process.Kill()
	<-am.done
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
