package userfile

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// resolvers runs fn with openat2 and with the walk that stands in for it.
func resolvers(t *testing.T, fn func(t *testing.T)) {
	t.Helper()
	for _, tc := range []struct {
		name string
		walk bool
	}{{"openat2", false}, {"walk", true}} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.walk {
				fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC})
				if err != nil {
					t.Skipf("skipping: openat2 unavailable (Linux 5.6+): %v", err)
				}
				unix.Close(fd)
			}
			noOpenat2.Store(tc.walk)
			t.Cleanup(func() { noOpenat2.Store(false) })
			fn(t)
		})
	}
}

// tree builds a root directory and a secret outside it, as a hostile
// user would lay them out: links that point out of the root, absolutely
// and by "..", to the secret.
func tree(t *testing.T) (root, secret string) {
	t.Helper()
	dir := t.TempDir()
	root = filepath.Join(dir, "root")
	secret = filepath.Join(dir, "secret.txt")
	write(t, secret, "0 ffffffffffffffff TOPSECRET\n", 0o600)
	for _, d := range []string{"tmp", "usr/lib/debug", "real"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(root, "tmp/perf-1.map"), "1000 10 jit\n", 0o644)
	write(t, filepath.Join(root, "real/file"), "inside\n", 0o644)
	// The same path as the secret, inside the root: where an absolute
	// link must land.
	write(t, filepath.Join(root, secret), "inside twin\n", 0o644)
	links := map[string]string{
		"tmp/abs.map":    secret,
		"tmp/dotdot.map": strings.Repeat("../", 12) + strings.TrimPrefix(secret, "/"),
		"tmp/rel.map":    "../real/file",
		"linkdir":        "real",
		"escdir":         filepath.Dir(secret),
		"tmp/self":       "/proc/self/root" + secret,
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	return root, secret
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, f *File) string {
	t.Helper()
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

// TestOpenInRoot opens names inside a root the way a process with that
// root would see them: nothing a link says leads out of it.
func TestOpenInRoot(t *testing.T) {
	resolvers(t, func(t *testing.T) {
		root, secret := tree(t)
		for _, tc := range []struct {
			name     string
			symlinks bool
			want     string // content, or "" for an error
			err      error  // errors.Is target; nil with want "" means any error
		}{
			{"tmp/perf-1.map", false, "1000 10 jit\n", nil},
			{"/tmp/perf-1.map", false, "1000 10 jit\n", nil},
			{"../../../../tmp/perf-1.map", false, "1000 10 jit\n", nil},
			{"tmp/abs.map", false, "", ErrSymlink},
			{"tmp/dotdot.map", false, "", ErrSymlink},
			{"tmp/rel.map", false, "", ErrSymlink},
			{"linkdir/file", false, "", ErrSymlink},
			{"escdir/secret.txt", false, "", ErrSymlink},
			// Followed, links stay inside: the absolute link and the
			// one climbing by ".." both land on the twin inside.
			{"tmp/abs.map", true, "inside twin\n", nil},
			{"tmp/dotdot.map", true, "inside twin\n", nil},
			{"tmp/rel.map", true, "inside\n", nil},
			{"linkdir/file", true, "inside\n", nil},
			{"escdir/secret.txt", true, "inside twin\n", nil},
			{"tmp/self", true, "", nil},
			{"tmp", false, "", ErrNotRegular},
			{"tmp/missing", false, "", os.ErrNotExist},
		} {
			f, err := Open(ctx(t), root, tc.name, Options{Symlinks: tc.symlinks})
			if tc.want == "" {
				if err == nil {
					got := readAll(t, f)
					t.Errorf("Open(%q, symlinks %v) read %q, want an error", tc.name, tc.symlinks, got)
					continue
				}
				if tc.err != nil && !errors.Is(err, tc.err) {
					t.Errorf("Open(%q, symlinks %v): %v, want %v", tc.name, tc.symlinks, err, tc.err)
				}
				continue
			}
			if err != nil {
				t.Errorf("Open(%q, symlinks %v): %v", tc.name, tc.symlinks, err)
				continue
			}
			if got := readAll(t, f); got != tc.want {
				t.Errorf("Open(%q, symlinks %v) read %q, want %q", tc.name, tc.symlinks, got, tc.want)
			}
		}
		// A magic link is never followed, even where links are: the
		// host's procfs, reached from the host's root.
		if f, err := Open(ctx(t), "/", "proc/self/root/etc/hostname", Options{Symlinks: true}); !errors.Is(err, ErrSymlink) {
			if err == nil {
				f.Close()
			}
			t.Errorf("Open through /proc/self/root: %v, want ErrSymlink", err)
		}
		// The secret itself was never what any of them read.
		if b, _ := os.ReadFile(secret); !strings.Contains(string(b), "TOPSECRET") {
			t.Fatal("the secret changed")
		}
	})
}

// TestOpenRefusesSpecialFiles: a FIFO, a device and a socket are refused
// at once, without opening them (a FIFO would block the open, a device's
// driver would run).
func TestOpenRefusesSpecialFiles(t *testing.T) {
	resolvers(t, func(t *testing.T) {
		root := t.TempDir()
		if err := unix.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
			t.Fatal(err)
		}
		names := []string{"fifo"}
		if os.Geteuid() == 0 {
			// /dev/null's numbers: harmless should the check fail.
			if err := unix.Mknod(filepath.Join(root, "dev"), unix.S_IFCHR|0o644, int(unix.Mkdev(1, 3))); err == nil {
				names = append(names, "dev")
			}
		}
		l, err := net.Listen("unix", filepath.Join(root, "sock"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		names = append(names, "sock")
		for _, name := range names {
			start := time.Now()
			_, err := Open(ctx(t), root, name, Options{})
			if !errors.Is(err, ErrNotRegular) {
				t.Errorf("Open(%s): %v, want ErrNotRegular", name, err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("Open(%s) took %v", name, d)
			}
			_, err = OpenPath(ctx(t), filepath.Join(root, name), Options{})
			if !errors.Is(err, ErrNotRegular) {
				t.Errorf("OpenPath(%s): %v, want ErrNotRegular", name, err)
			}
		}
	})
}

// TestOpenOwnerAndAccess checks perf(1)'s owner rule and the reader's
// permission bits.
func TestOpenOwnerAndAccess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root to give files to other users")
	}
	root := t.TempDir()
	write(t, filepath.Join(root, "mine"), "x\n", 0o600)
	write(t, filepath.Join(root, "rootonly"), "x\n", 0o600)
	write(t, filepath.Join(root, "public"), "x\n", 0o644)
	write(t, filepath.Join(root, "other"), "x\n", 0o644)
	if err := os.Chown(filepath.Join(root, "mine"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(root, "other"), 1234, 1234); err != nil {
		t.Fatal(err)
	}
	nobody := &Cred{UID: [4]uint32{65534, 65534, 65534, 65534}, GID: [4]uint32{65534, 65534, 65534, 65534}}
	perf := Options{Owners: nobody.Owners(), Reader: nobody}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"mine", nil},
		{"public", nil},
		{"rootonly", ErrAccess},
		{"other", ErrOwner},
	} {
		f, err := Open(ctx(t), root, tc.name, perf)
		if err == nil {
			f.Close()
		}
		if tc.err == nil && err != nil || tc.err != nil && !errors.Is(err, tc.err) {
			t.Errorf("Open(%s) for nobody: %v, want %v", tc.name, err, tc.err)
		}
	}
	rootCred := &Cred{}
	if f, err := Open(ctx(t), root, "rootonly", Options{Owners: rootCred.Owners(), Reader: rootCred}); err != nil {
		t.Errorf("Open(rootonly) for root: %v", err)
	} else {
		f.Close()
	}
}

func TestOpenMaxSize(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "big"), strings.Repeat("x", 1000), 0o644)
	_, err := Open(ctx(t), root, "big", Options{MaxSize: 999})
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("Open(big) with a 999-byte cap: %v, want ErrTooLarge", err)
	}
	f, err := Open(ctx(t), root, "big", Options{MaxSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Info.Size != 1000 || !f.Info.Local {
		t.Errorf("Info = %+v, want size 1000 on a local file system", f.Info)
	}
	b, truncated, err := ReadAll(f, 600)
	if err != nil || len(b) != 600 || !truncated {
		t.Errorf("ReadAll(600) = %d bytes, truncated %v, %v", len(b), truncated, err)
	}
	b, truncated, err = ReadAll(f, 1000)
	if err != nil || len(b) != 1000 || truncated {
		t.Errorf("ReadAll(1000) = %d bytes, truncated %v, %v", len(b), truncated, err)
	}
}

func TestSplitRoot(t *testing.T) {
	for _, tc := range []struct {
		path, root, rest string
		ok               bool
	}{
		{"/proc/123/root/usr/lib/x.so", "/proc/123/root", "/usr/lib/x.so", true},
		{"/host/proc/7/root", "/host/proc/7/root", "/", true},
		{"/proc/123/root/root/x", "/proc/123/root", "/root/x", true},
		{"/proc/self/root/x", "", "", false},
		{"/root/x", "", "", false},
		{"/usr/bin/rootless", "", "", false},
		{"/proc/12/rootfs/x", "", "", false},
	} {
		root, rest, ok := SplitRoot(tc.path)
		if root != tc.root || rest != tc.rest || ok != tc.ok {
			t.Errorf("SplitRoot(%q) = %q, %q, %v; want %q, %q, %v", tc.path, root, rest, ok, tc.root, tc.rest, tc.ok)
		}
	}
}

func TestParseStatus(t *testing.T) {
	c, err := ParseStatus([]byte("Name:\tx\nUid:\t1000\t1001\t1002\t1003\nGid:\t10\t11\t12\t13\nGroups:\t4 24 27 \nNSpid:\t5\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.UID != [4]uint32{1000, 1001, 1002, 1003} || c.GID != [4]uint32{10, 11, 12, 13} || len(c.Groups) != 3 {
		t.Fatalf("cred = %+v", c)
	}
	for _, tc := range []struct {
		uid, gid, mode uint32
		want           bool
	}{
		{1003, 0, 0o400, true},  // owner by the file system uid
		{1000, 0, 0o400, false}, // the real uid is not who reads
		{0, 13, 0o040, true},
		{0, 24, 0o040, true},
		{0, 25, 0o040, false},
		{0, 25, 0o004, true},
		{1003, 13, 0o066, false}, // the owner's bits decide for the owner
	} {
		if got := c.CanRead(tc.uid, tc.gid, tc.mode); got != tc.want {
			t.Errorf("CanRead(%d, %d, %o) = %v", tc.uid, tc.gid, tc.mode, got)
		}
	}
	if _, err := ParseStatus([]byte("Name:\tx\n")); err == nil {
		t.Error("ParseStatus without Uid: no error")
	}
}

// TestDoTimeout: an operation that never returns costs its caller the
// timeout, then stops the next one for the same user at once, not the
// others'.
func TestDoTimeout(t *testing.T) {
	release := make(chan struct{})
	discarded := make(chan int, 1)
	c, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	before := Counts()[ReasonTimeout]
	_, err := Do(c, "uid 4242", func() (int, error) { <-release; return 7, nil }, func(v int) { discarded <- v })
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Do: %v, want ErrTimeout", err)
	}
	if Counts()[ReasonTimeout] <= before || Stuck() < 1 {
		t.Errorf("timeout not counted: %v, %d stuck", Counts(), Stuck())
	}
	start := time.Now()
	if _, err := Do(ctx(t), "uid 4242", func() (int, error) { return 1, nil }, nil); !errors.Is(err, ErrBusy) {
		t.Errorf("Do for the same user while stuck: %v, want ErrBusy", err)
	}
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("ErrBusy took %v", d)
	}
	if v, err := Do(ctx(t), "uid 4243", func() (int, error) { return 2, nil }, nil); v != 2 || err != nil {
		t.Errorf("Do for another user: %d, %v", v, err)
	}
	close(release)
	select {
	case v := <-discarded:
		if v != 7 {
			t.Errorf("discarded %d, want 7", v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the late result was not discarded")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := Do(ctx(t), "uid 4242", func() (int, error) { return 3, nil }, nil); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the user stays busy after the stuck operation returned")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFUSENeverAnswers mounts a FUSE file system whose daemon never
// answers (nobody reads its /dev/fuse descriptor): every lookup in it
// blocks in the kernel. Open gives up in time, and the goroutine left
// behind returns once the connection is aborted.
func TestFUSENeverAnswers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: mounting FUSE needs root")
	}
	dir := t.TempDir()
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("skipping: no /dev/fuse: %v", err)
	}
	opts := "fd=" + strconv.Itoa(fd) + ",rootmode=40000,user_id=0,group_id=0"
	if err := unix.Mount("spanwatch-test", dir, "fuse.spanwatch-test", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		t.Skipf("skipping: mount fuse: %v", err)
	}
	t.Cleanup(func() {
		// Closing the device aborts the connection: blocked requests
		// fail with ENOTCONN and the stuck goroutines return.
		unix.Close(fd)
		unix.Unmount(dir, unix.MNT_DETACH)
	})
	resolvers(t, func(t *testing.T) {
		c, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := Open(c, dir, "tmp/perf-1.map", Options{On: "uid fuse-" + t.Name()})
		if !errors.Is(err, ErrTimeout) {
			t.Errorf("Open in a FUSE mount that never answers: %v, want ErrTimeout", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Open took %v with a 300ms context", d)
		}
	})
}
