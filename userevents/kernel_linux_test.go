//go:build linux

package userevents

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fakeKernel points kernelConfigPaths and kallsymsPath at files written by
// the test ("" leaves a file out).
func fakeKernel(t *testing.T, config, kallsyms string) {
	t.Helper()
	dir := t.TempDir()
	oldConfigs, oldSyms := kernelConfigPaths, kallsymsPath
	t.Cleanup(func() { kernelConfigPaths, kallsymsPath = oldConfigs, oldSyms })
	cfgPath := filepath.Join(dir, "config.gz")
	if config != "" {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write([]byte(config))
		zw.Close()
		if err := os.WriteFile(cfgPath, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kernelConfigPaths = func() []string { return []string{cfgPath, filepath.Join(dir, "no-such-config")} }
	kallsymsPath = filepath.Join(dir, "kallsyms")
	if kallsyms != "" {
		if err := os.WriteFile(kallsymsPath, []byte(kallsyms), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDataFileHint checks what a user who cannot look into tracefs is told:
// that the kernel has no user_events when its config or symbols say so, and
// nothing yet (open then gives the permission hint) when it has them or
// nothing tells.
func TestDataFileHint(t *testing.T) {
	const path = "/sys/kernel/tracing/user_events_data"
	denied := &fs.PathError{Op: "stat", Path: path, Err: syscall.EACCES}
	const (
		without = "CONFIG_TRACING=y\n# CONFIG_USER_EVENTS is not set\n"
		with    = "CONFIG_TRACING=y\nCONFIG_USER_EVENTS=y\n"
		symsNo  = "0000000000000000 T _text\n0000000000000000 t user_event_mm_dup\n"
		symsYes = "0000000000000000 T _text\n0000000000000000 t user_events_ioctl\n"
	)
	for _, tc := range []struct {
		name, config, kallsyms string
		statErr                error
		unsupported            bool
	}{
		{"config without", without, symsYes, denied, true},
		{"config with", with, symsNo, denied, false},
		{"symbols without", "", symsNo, denied, true},
		{"symbols with", "", symsYes, denied, false},
		{"nothing tells", "", "", denied, false},
		{"file seen", without, "", nil, false},
		{"file absent", with, symsYes, &fs.PathError{Op: "stat", Path: path, Err: syscall.ENOENT}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fakeKernel(t, tc.config, tc.kallsyms)
			err := checkDataFile(path, tc.statErr)
			if got := errors.Is(err, ErrNotSupported); got != tc.unsupported {
				t.Fatalf("checkDataFile: %v; want ErrNotSupported %t", err, tc.unsupported)
			}
			if err != nil && strings.Contains(err.Error(), "chmod") {
				t.Errorf("the error suggests chmod: %v", err)
			}
			if tc.unsupported && tc.statErr == denied && !strings.Contains(err.Error(), "the running kernel has no user_events") {
				t.Errorf("the error does not say the kernel has no user_events: %v", err)
			}
		})
	}
}

const childRegisterEnv = "SPANWATCH_TEST_REGISTER_AS_USER"

// TestRegisterAsUserChild is run by TestRegisterAsUser as an unprivileged
// user: it registers an event and prints the error.
func TestRegisterAsUserChild(t *testing.T) {
	if os.Getenv(childRegisterEnv) == "" {
		t.Skip("helper process of TestRegisterAsUser, run only by it")
	}
	_, err := Register("swtest_as_user u32 x")
	os.Stdout.WriteString("register error: " + errString(err) + "\n")
}

// TestRegisterAsUser registers an event as user nobody on this kernel, the
// way an application using the span SDK as a plain user does: where the
// kernel has no user_events, the error says so rather than telling the user
// to chmod a file that does not exist.
func TestRegisterAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a child as another user")
	}
	has, known := kernelHasUserEvents()
	if !known {
		t.Skip("neither the kernel's configuration nor /proc/kallsyms is readable here")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy nobody may run: the test binary's own directory is root's.
	// t.TempDir makes its directories 0700: open the test's two levels.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "userevents.test")
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestRegisterAsUserChild$", "-test.v")
	cmd.Env = append(os.Environ(), childRegisterEnv+"=1", "SPANWATCH_IN_VM=")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	_, line, ok := strings.Cut(string(out), "register error: ")
	if !ok {
		t.Fatalf("child printed no error line:\n%s", out)
	}
	line, _, _ = strings.Cut(line, "\n")
	t.Logf("as nobody: %s", line)
	if !has {
		if !strings.Contains(line, "no user_events") || strings.Contains(line, "chmod") {
			t.Errorf("on a kernel without user_events, nobody is told %q; want it to say the kernel has no user_events, without chmod", line)
		}
		return
	}
	// With user_events, tracefs is root's on most systems and the hint
	// says how to grant access.
	if line != "no error" && strings.Contains(line, "no user_events") {
		t.Errorf("on a kernel with user_events, nobody is told %q", line)
	}
}
