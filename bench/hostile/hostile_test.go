//go:build linux && amd64

package hostilebench

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/internal/elfbuild"
)

const (
	secretMark  = "TOPSECRET"
	plantedMark = "planted_by_nobody"
)

// A lab holds the binaries and the secret, in a directory outside /tmp
// (the victims have their own /tmp) that nobody can traverse.
type lab struct {
	dir     string
	agent   string
	emitter string // built -O0 -g -fno-omit-frame-pointer
	goemit  string
	sleeper string
	secret  string
}

func newLab(b *testing.B) *lab {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("needs root: the agent, and becoming nobody")
	}
	for _, tool := range []string{"cc", "setpriv", "unshare", "mount", "strip", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("%s not found: %v", tool, err)
		}
	}
	if _, err := os.Stat("/usr/include/x86_64-linux-gnu/sys/sdt.h"); err != nil {
		b.Skip("no sys/sdt.h: install systemtap-sdt-dev")
	}
	dir, err := os.MkdirTemp("/var/tmp", "spanwatch-hostile-bench-")
	if err != nil {
		b.Skip(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	l := &lab{dir: dir, agent: os.Getenv("SPANWATCH_BIN")}
	run := func(name string, args ...string) {
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			b.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	if l.agent == "" {
		l.agent = filepath.Join(dir, "spanwatch")
		run("go", "build", "-o", l.agent, "github.com/spanwatch/spanwatch/cmd/spanwatch")
	}
	l.emitter = filepath.Join(dir, "emitter")
	run("cc", "-O0", "-g", "-fno-omit-frame-pointer", "-o", l.emitter, "testdata/emitter.c")
	l.sleeper = filepath.Join(dir, "sleeper")
	run("cc", "-O2", "-o", l.sleeper, "testdata/sleeper.c")
	l.goemit = filepath.Join(dir, "goemitter")
	run("go", "build", "-o", l.goemit, "./testdata/goemitter")
	sdir := filepath.Join(dir, "secret")
	os.Mkdir(sdir, 0o755)
	l.secret = filepath.Join(sdir, "secret.txt")
	if err := os.WriteFile(l.secret, []byte("0 ffffffffffffffff "+secretMark+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	return l
}

// copyBin copies a binary under a new name (its own inode).
func (l *lab) copyBin(b *testing.B, from, name string) string {
	data, err := os.ReadFile(from)
	if err != nil {
		b.Fatal(err)
	}
	to := filepath.Join(l.dir, name)
	if err := os.WriteFile(to, data, 0o755); err != nil {
		b.Fatal(err)
	}
	return to
}

// A victim is a process of nobody's with a /tmp of its own.
type victim struct {
	bin       string
	userns    bool   // user, mount and PID namespaces, nobody mapped to root
	asRoot    bool   // root's process (a mount namespace of its own)
	rootSetup string // as root in its mount namespace (not with userns)
	setup     string // as the process's user; $$ is its PID as it sees it
}

type proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func (p *proc) stop() {
	p.stdin.Close()
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

func (v victim) start(b *testing.B) *proc {
	setup := v.setup
	if setup == "" {
		setup = "true"
	}
	var cmd *exec.Cmd
	if v.userns {
		script := fmt.Sprintf("mount -t tmpfs none /tmp && (%s) && exec %s", setup, v.bin)
		cmd = exec.Command("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
			"unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--kill-child", "/bin/sh", "-c", script)
	} else {
		rootSetup := v.rootSetup
		if rootSetup == "" {
			rootSetup = "true"
		}
		as := "setpriv --reuid=nobody --regid=nogroup --clear-groups"
		if v.asRoot {
			as = ""
		}
		inner := fmt.Sprintf("%s /bin/sh -c '(%s) && exec %s'", as, strings.ReplaceAll(setup, "'", `'\''`), v.bin)
		script := fmt.Sprintf("mount -t tmpfs -o mode=1777 none /tmp && (%s) && exec %s", rootSetup, inner)
		cmd = exec.Command("unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script)
	}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &proc{cmd, stdin}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		p.stop()
		b.Fatalf("victim %s did not start: %q, %v", v.bin, line, err)
	}
	go io.Copy(io.Discard, stdout)
	return p
}

// An agent is a running spanwatch with its outputs.
type agent struct {
	cmd    *exec.Cmd
	output string
	addr   string
	hook   *hook

	mu      sync.Mutex
	peakRSS int64
	done    chan struct{}
}

type hook struct {
	srv    *http.Server
	mu     sync.Mutex
	bodies bytes.Buffer
}

func freeAddr(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startAgent runs the agent with USDT sources on the given binaries (span
// name -> binary), a 1 ms budget on every hostile span, --output, the
// listener and a webhook.
func startAgent(b *testing.B, l *lab, name string, sources map[string]string) *agent {
	b.Helper()
	h := &hook{}
	hookAddr := freeAddr(b)
	h.srv = &http.Server{Addr: hookAddr, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.bodies.Write(body)
		h.bodies.WriteByte('\n')
		h.mu.Unlock()
	})}
	go h.srv.ListenAndServe()
	var cfg strings.Builder
	cfg.WriteString("sources:\n  usdt:\n")
	for span, bin := range sources {
		fmt.Fprintf(&cfg, "    - binary: %s\n      span: %s\n      start: {provider: hostile, probe: start}\n      end: {provider: hostile, probe: done}\n", bin, span)
	}
	dir := filepath.Join(l.dir, "run-"+name)
	os.MkdirAll(dir, 0o755)
	fmt.Fprintf(&cfg, "budgets:\n  - span: \"hostile.*\"\n    budget: 1ms\n"+
		"webhooks:\n  - name: hook\n    url: http://%s/hook\n    group_wait: 100ms\n    group_interval: 1s\n"+
		"routing:\n  outbox:\n    path: %s\ncollector:\n  interval: 1s\n", hookAddr, filepath.Join(dir, "outbox.db"))
	cfgPath := filepath.Join(dir, "spanwatch.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	a := &agent{output: filepath.Join(dir, "out.jsonl"), addr: freeAddr(b), hook: h, done: make(chan struct{})}
	a.cmd = exec.Command(l.agent, "run", "--config", cfgPath, "--output", a.output, "--metrics-addr", a.addr)
	logf, _ := os.Create(filepath.Join(dir, "agent.log"))
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	if err := a.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { a.cmd.Wait(); logf.Close(); close(a.done) }()
	go a.sampleRSS()
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get("http://" + a.addr + "/metrics")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case <-a.done:
			log, _ := os.ReadFile(filepath.Join(dir, "agent.log"))
			b.Fatalf("agent exited: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			b.Fatal("agent not ready after 90s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	return a
}

func (a *agent) sampleRSS() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-a.done:
			return
		case <-t.C:
		}
		if rss := rssOf(a.cmd.Process.Pid); rss > 0 {
			a.mu.Lock()
			a.peakRSS = max(a.peakRSS, rss)
			a.mu.Unlock()
		}
	}
}

// rssOf returns a process's resident set in bytes, from /proc/PID/status.
func rssOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func (a *agent) resetPeak() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.peakRSS = rssOf(a.cmd.Process.Pid)
	return a.peakRSS
}

func (a *agent) peak() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.peakRSS
}

// sigterm sends SIGTERM and returns how long the agent took to exit, or
// -1 when it had not after 30 s (it is killed then).
func (a *agent) sigterm() time.Duration {
	start := time.Now()
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
		a.hook.srv.Close()
		return time.Since(start)
	case <-time.After(30 * time.Second):
		a.cmd.Process.Kill()
		<-a.done
		a.hook.srv.Close()
		return -1
	}
}

// outputSince returns what --output holds past off.
func (a *agent) outputSince(off int64) []byte {
	b, _ := os.ReadFile(a.output)
	if off > int64(len(b)) {
		return nil
	}
	return b[off:]
}

func (a *agent) outputSize() int64 {
	st, err := os.Stat(a.output)
	if err != nil {
		return 0
	}
	return st.Size()
}

func (a *agent) snapshot() []byte {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + a.addr + "/snapshot")
	if err != nil {
		return []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return b
}

// spans counts, in snapshot lines, the overruns and the spans of a name.
func spans(lines []byte, name string) (overruns, count int) {
	for line := range bytes.SplitSeq(lines, []byte{'\n'}) {
		var s struct {
			Series []struct {
				Span  string `json:"span"`
				Count int    `json:"count"`
			} `json:"series"`
			Overruns []struct {
				Span string `json:"span"`
			} `json:"overruns"`
		}
		if json.Unmarshal(line, &s) != nil {
			continue
		}
		for _, o := range s.Overruns {
			if o.Span == name {
				overruns++
			}
		}
		for _, sr := range s.Series {
			if sr.Span == name {
				count += sr.Count
			}
		}
	}
	return overruns, count
}

// A result is one row of the table.
type result struct {
	name                        string
	leakOut, leakSnap, leakHook int
	rssBefore, rssPeak          int64
	controlOverruns             int
	goSpans                     int
	sigterm                     time.Duration
}

func (r result) String() string {
	term := "never (killed after 30s)"
	if r.sigterm >= 0 {
		term = r.sigterm.Round(10 * time.Millisecond).String()
	}
	return fmt.Sprintf("%-34s leaked out/snapshot/webhook %d/%d/%d  rss %d -> %d MB  control overruns after %d  go spans after %d  sigterm %s",
		r.name, r.leakOut, r.leakSnap, r.leakHook, r.rssBefore>>20, r.rssPeak>>20, r.controlOverruns, r.goSpans, term)
}

// A scenario is one case: the victim, and what marks a leak.
type scenario struct {
	name  string
	mark  string
	setup func(b *testing.B, l *lab) (victim, string) // the victim and its binary for the source
	hold  time.Duration                               // how long the attack runs before the control starts
}

func runScenario(b *testing.B, l *lab, sc scenario) result {
	v, bin := sc.setup(b, l)
	slug := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(sc.name))
	control := l.copyBin(b, l.emitter, "control-"+slug)
	a := startAgent(b, l, slug, map[string]string{"hostile.slow": bin, "hostile.control": control})
	time.Sleep(2 * time.Second)
	r := result{name: sc.name, rssBefore: a.resetPeak()}
	vp := v.start(b)
	defer vp.stop()
	time.Sleep(sc.hold)
	// What the agent does for everyone else after the attack: a control
	// emitter's overruns, and a Go program's spans (the /proc scan must
	// find it).
	off := a.outputSize()
	cp := victim{bin: control}.start(b)
	defer cp.stop()
	gp := victim{bin: l.goemit}.start(b)
	defer gp.stop()
	time.Sleep(6 * time.Second)
	after := a.outputSince(off)
	r.controlOverruns, _ = spans(after, "hostile.control")
	_, r.goSpans = spans(after, "hostile.go")
	r.rssPeak = a.peak()
	out, _ := os.ReadFile(a.output)
	r.leakOut = bytes.Count(out, []byte(sc.mark))
	r.leakSnap = bytes.Count(a.snapshot(), []byte(sc.mark))
	r.sigterm = a.sigterm()
	a.hook.mu.Lock()
	r.leakHook = bytes.Count(a.hook.bodies.Bytes(), []byte(sc.mark))
	a.hook.mu.Unlock()
	return r
}

func buildID(b *testing.B, path string) string {
	ef, err := elf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer ef.Close()
	s := ef.Section(".note.gnu.build-id")
	if s == nil {
		b.Skip("no GNU build id")
	}
	d, _ := s.Data()
	if len(d) < 16 {
		b.Skip("short build id note")
	}
	return hex.EncodeToString(d[16:])
}

func scenarios() []scenario {
	plain := func(setup string, userns bool) func(*testing.B, *lab) (victim, string) {
		return func(b *testing.B, l *lab) (victim, string) {
			bin := l.copyBin(b, l.emitter, fmt.Sprintf("victim-%d", time.Now().UnixNano()))
			return victim{bin: bin, userns: userns, setup: strings.ReplaceAll(setup, "SECRET", l.secret)}, bin
		}
	}
	dotdot := "ln -s ../../../../../..SECRET /tmp/perf-$$.map"
	return []scenario{
		{name: "no attack (baseline)", mark: secretMark, hold: 3 * time.Second, setup: plain("true", false)},
		{name: "symlink to a root-only file", mark: secretMark, hold: 3 * time.Second, setup: plain("ln -s SECRET /tmp/perf-$$.map", false)},
		{name: "userns: absolute symlink", mark: secretMark, hold: 3 * time.Second, setup: plain("ln -s SECRET /tmp/perf-$$.map", true)},
		{name: "userns: ../../.. symlink", mark: secretMark, hold: 3 * time.Second, setup: plain(dotdot, true)},
		{name: "nobody's map for root's process", mark: plantedMark, hold: 3 * time.Second, setup: func(b *testing.B, l *lab) (victim, string) {
			bin := l.copyBin(b, l.emitter, "victim-root")
			plant := "setpriv --reuid=nobody --regid=nogroup --clear-groups sh -c \"echo '0 ffffffffffffffff " + plantedMark + "' > /tmp/perf-$$.map\""
			return victim{bin: bin, asRoot: true, rootSetup: plant}, bin
		}},
		{name: "FIFO as the perf map", mark: secretMark, hold: 3 * time.Second, setup: plain("mkfifo /tmp/perf-$$.map", false)},
		{name: "FIFO as the build-id debug file", mark: secretMark, hold: 3 * time.Second, setup: func(b *testing.B, l *lab) (victim, string) {
			bin := l.copyBin(b, l.emitter, "victim-stripped")
			if out, err := exec.Command("strip", "--strip-all", bin).CombinedOutput(); err != nil {
				b.Fatalf("strip: %v\n%s", err, out)
			}
			id := buildID(b, bin)
			setup := fmt.Sprintf("mount -t tmpfs none /usr/lib/debug && mkdir -p /usr/lib/debug/.build-id/%s && mkfifo /usr/lib/debug/.build-id/%s/%s.debug", id[:2], id[:2], id[2:])
			return victim{bin: bin, userns: true, setup: setup}, bin
		}},
		{name: "20 KB binary, 128 MiB .symtab", mark: secretMark, hold: 4 * time.Second, setup: func(b *testing.B, l *lab) (victim, string) {
			bin := l.copyBin(b, l.sleeper, "sleeper-bomb")
			if err := elfbuild.Patch(bin, ".symtab", nil, 128<<20, 0); err != nil {
				b.Fatal(err)
			}
			// The source still traces an emitter; the bomb only runs.
			return victim{bin: bin}, l.copyBin(b, l.emitter, "victim-idle")
		}},
		{name: "emitter, 256 MiB .symtab", mark: secretMark, hold: 4 * time.Second, setup: func(b *testing.B, l *lab) (victim, string) {
			bin := l.copyBin(b, l.emitter, "victim-symtab")
			if err := elfbuild.Patch(bin, ".symtab", nil, 256<<20, 0); err != nil {
				b.Fatal(err)
			}
			return victim{bin: bin}, bin
		}},
		{name: "emitter, zlib bomb .debug_info", mark: secretMark, hold: 4 * time.Second, setup: func(b *testing.B, l *lab) (victim, string) {
			bin := l.copyBin(b, l.emitter, "victim-zlib")
			if err := elfbuild.Patch(bin, ".debug_info", elfbuild.Zlib(4<<30, 1<<30), 0, elf.SHF_COMPRESSED); err != nil {
				b.Fatal(err)
			}
			return victim{bin: bin}, bin
		}},
		{name: "emitter, 204 MB perf map", mark: secretMark, hold: 8 * time.Second, setup: plain(
			"awk 'BEGIN { for (i = 0; i < 3000000; i++) printf \"%x 10 jit_function_number_%08d_with_a_name\\n\", 268435456 + 16*i, i }' > /tmp/perf-$$.map", false)},
	}
}

// BenchmarkHostileAgent runs every case against the agent and prints a
// row per case.
func BenchmarkHostileAgent(b *testing.B) {
	l := newLab(b)
	b.Logf("agent %s", l.agent)
	for _, sc := range scenarios() {
		if f := os.Getenv("SPANWATCH_HOSTILE_CASE"); f != "" && !strings.Contains(sc.name, f) {
			continue
		}
		r := runScenario(b, l, sc)
		fmt.Println(r)
	}
}
