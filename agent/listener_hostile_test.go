//go:build linux

package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/notify"
	"github.com/spanwatch/spanwatch/snapshot"
)

// kernelAddr is the address of the kernel frame in testSnapshot's overrun.
const kernelAddr = 0xffffffff81abcdef

// testSnapshot has one series and one overrun with a kernel stack.
func testSnapshot() *snapshot.Snapshot {
	return &snapshot.Snapshot{Version: snapshot.Version, Time: time.Now(), WindowNs: int64(time.Second),
		Series: []snapshot.Series{{Span: "checkout", CgroupID: 42, Count: 50}},
		Overruns: []snapshot.Overrun{{Span: "checkout", PID: 4242, CgroupID: 42, DurationNs: 3e9,
			UserStack:   []snapshot.Frame{{Addr: 0x401234, Function: "main.checkout"}},
			KernelStack: []snapshot.Frame{{Addr: kernelAddr, Function: "do_nanosleep", Module: "[kernel]", Offset: 0x42}}}}}
}

// serveAgent starts an agent's listener, without BPF, for the
// configuration text (its relative paths taken from dir), with snap as its
// newest snapshot and in its exporter; it returns the agent and its
// address.
func serveAgent(t *testing.T, dir, text string, snap *snapshot.Snapshot, logs *syncBuffer, before ...func(*Agent)) (*Agent, string) {
	t.Helper()
	cfg, err := config.Parse(filepath.Join(dir, "spanwatch.yaml"), []byte(text), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if logs == nil {
		logs = &syncBuffer{}
	}
	a, err := New(cfg, Options{ListenAddr: "127.0.0.1:0", Logger: testLogger(logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if snap != nil {
		a.exporter.Observe(snap)
		a.last.set(snap)
	}
	for _, f := range before {
		f(a)
	}
	a.listener.serve()
	return a, a.Addr().String()
}

// kernelAddrOf returns the kernel frame's address in a /snapshot body.
func kernelAddrOf(t *testing.T, body string) uint64 {
	t.Helper()
	var s snapshot.Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil || len(s.Overruns) != 1 || len(s.Overruns[0].KernelStack) != 1 {
		t.Fatalf("snapshot body: %v\n%.300s", err, body)
	}
	f := s.Overruns[0].KernelStack[0]
	if f.Function != "do_nanosleep" {
		t.Errorf("kernel frame lost its name: %+v", f)
	}
	return f.Addr
}

// TestListenerAccess runs clients against the real listener, as root in
// this process and as nobody in a child process, over plain HTTP, basic
// authentication, TLS with verified client certificates and TLS alone:
// /metrics goes to every client the web configuration lets in;
// /snapshot and /api/* only to an authenticated one (a basic-auth user, a
// verified client certificate, or root over loopback); kernel addresses
// only with listener.kernel_addresses, and only to those.
func TestListenerAccess(t *testing.T) {
	dir := sharedDir(t)
	pki := newPKI(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("wonderland"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	users := fmt.Sprintf("basic_auth_users:\n  alice: %s\n", hash)
	mtls := fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: %s\n", pki.serverCert, pki.serverKey, pki.ca)
	tlsOnly := fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n", pki.serverCert, pki.serverKey)
	alice := []string{"SPANWATCH_TEST_USER=alice", "SPANWATCH_TEST_PASS=wonderland"}
	caEnv := []string{"SPANWATCH_TEST_CA=" + pki.ca}
	certEnv := append([]string{"SPANWATCH_TEST_CERT=" + pki.clientCert, "SPANWATCH_TEST_KEY=" + pki.clientKey}, caEnv...)

	type want struct {
		path string
		code int // 0: the request fails (no TLS handshake)
		// kernel: the kernel frame's address is served (checked on 200
		// /snapshot answers).
		kernel bool
	}
	for _, tc := range []struct {
		name    string
		web     string // the web configuration file; none when ""
		kernel  bool   // listener.kernel_addresses
		asRoot  *tls.Config
		rootWho []string // basic auth of the root client: user, password
		root    []want
		nobody  []string // the client's environment
		asNob   []want
	}{
		{
			name: "plain HTTP, no authentication",
			root: []want{{"/metrics", 200, false}, {"/snapshot", 200, false}, {"/api/alerts", 200, false}, {"/api/status", 200, false}},
			asNob: []want{{"/metrics", 200, false}, {"/-/healthy", 200, false}, {"/snapshot", 403, false}, {"/snapshot?span=checkout", 403, false},
				{"/api/alerts", 403, false}, {"/api/status", 403, false}, {"/api/dead-letters", 403, false}},
		},
		{
			name: "plain HTTP, kernel addresses to authenticated clients", kernel: true,
			root:  []want{{"/snapshot", 200, true}},
			asNob: []want{{"/snapshot", 403, false}},
		},
		{
			name: "basic auth", web: users,
			root:   []want{{"/metrics", 401, false}, {"/snapshot", 401, false}},
			nobody: alice,
			asNob:  []want{{"/metrics", 200, false}, {"/snapshot", 200, false}, {"/api/status", 200, false}},
		},
		{
			name: "basic auth, wrong password", web: users,
			nobody: []string{"SPANWATCH_TEST_USER=alice", "SPANWATCH_TEST_PASS=queen"},
			asNob:  []want{{"/metrics", 401, false}, {"/snapshot", 401, false}},
		},
		{
			name: "basic auth, kernel addresses", web: users, kernel: true,
			rootWho: []string{"alice", "wonderland"},
			root:    []want{{"/snapshot", 200, true}},
			nobody:  alice,
			asNob:   []want{{"/snapshot", 200, true}},
		},
		{
			name: "TLS with verified client certificates", web: mtls,
			asRoot: &tls.Config{RootCAs: pki.pool},
			root:   []want{{"/metrics", 0, false}, {"/snapshot", 0, false}},
			nobody: certEnv,
			asNob:  []want{{"/metrics", 200, false}, {"/snapshot", 200, false}, {"/api/alerts", 200, false}},
		},
		{
			name: "TLS with client certificates, none given", web: mtls,
			nobody: caEnv,
			asNob:  []want{{"/metrics", 0, false}, {"/snapshot", 0, false}},
		},
		{
			name: "TLS alone", web: tlsOnly,
			asRoot: &tls.Config{RootCAs: pki.pool},
			root:   []want{{"/metrics", 200, false}, {"/snapshot", 200, false}},
			nobody: caEnv,
			asNob:  []want{{"/metrics", 200, false}, {"/snapshot", 403, false}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := "rules: []\n"
			if tc.web != "" || tc.kernel {
				text += "listener:\n"
			}
			if tc.web != "" {
				webFile := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".web.yml")
				if err := os.WriteFile(webFile, []byte(tc.web), 0o644); err != nil {
					t.Fatal(err)
				}
				text += "  web_config_file: " + filepath.Base(webFile) + "\n"
			}
			if tc.kernel {
				text += "  kernel_addresses: true\n"
			}
			_, addr := serveAgent(t, dir, text, testSnapshot(), nil)
			scheme := "http://"
			if tc.web != "" && strings.Contains(tc.web, "tls_server_config") {
				scheme = "https://"
			}
			check := func(who string, w want, res clientResult) {
				t.Helper()
				switch {
				case w.code == 0:
					if res.Error == "" {
						t.Errorf("%s GET %s: %d, want a refused handshake", who, w.path, res.Code)
					}
					return
				case res.Code != w.code:
					t.Errorf("%s GET %s: %d %s (%.200s), want %d", who, w.path, res.Code, res.Error, res.Body, w.code)
					return
				}
				if w.code == 200 && w.path == "/snapshot" {
					if got := kernelAddrOf(t, res.Body) == kernelAddr; got != w.kernel {
						t.Errorf("%s GET /snapshot: kernel address served %v, want %v", who, got, w.kernel)
					}
				}
				if w.code == 403 && !strings.Contains(res.Body, "authenticated") {
					t.Errorf("%s GET %s: 403 without saying why: %s", who, w.path, res.Body)
				}
			}
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc.asRoot}}
			for _, w := range tc.root {
				req, _ := http.NewRequest(http.MethodGet, scheme+addr+w.path, nil)
				if tc.rootWho != nil {
					req.SetBasicAuth(tc.rootWho[0], tc.rootWho[1])
				}
				var res clientResult
				resp, err := client.Do(req)
				if err != nil {
					res.Error = err.Error()
				} else {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					res.Code, res.Body = resp.StatusCode, string(b)
				}
				check("root", w, res)
			}
			if len(tc.asNob) == 0 {
				return
			}
			urls := make([]string, len(tc.asNob))
			for i, w := range tc.asNob {
				urls[i] = scheme + addr + w.path
			}
			for i, res := range getAsNobody(t, tc.nobody, urls...) {
				check("nobody", tc.asNob[i], res)
			}
		})
	}
}

// TestListenerRefusalCounted checks that a refused client is counted and
// that the startup log says who gets what.
func TestListenerRefusalCounted(t *testing.T) {
	var logs syncBuffer
	a, addr := serveAgent(t, sharedDir(t), "rules: []\n", testSnapshot(), &logs)
	res := getAsNobody(t, nil, "http://"+addr+"/snapshot", "http://"+addr+"/api/alerts")
	if res[0].Code != 403 || res[1].Code != 403 || !strings.Contains(res[0].Body, "uid 65534") {
		t.Fatalf("nobody got %+v", res)
	}
	if got := counterValue(t, a, "spanwatch_listener_rejected_total", map[string]string{"handler": "/snapshot", "reason": "forbidden"}); got != 1 {
		t.Errorf("rejected{/snapshot, forbidden} = %v, want 1", got)
	}
	for _, want := range []string{"msg=listening", "authentication=none", `snapshot_and_api="root over loopback only"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
}

// counterValue reads one counter of the agent's registry.
func counterValue(t *testing.T, a *Agent, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := a.exporter.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestListenerNotLoopback checks that a client reaching the listener on
// another address of this host, root or not, is refused the sensitive
// endpoints when no authentication is configured.
func TestListenerNotLoopback(t *testing.T) {
	ip := localNonLoopback()
	if ip == nil {
		t.Skip("this host has no non-loopback address to listen on")
	}
	cfg, err := config.Parse("rules.yaml", []byte("rules: []\n"), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	a, err := New(cfg, Options{ListenAddr: net.JoinHostPort(ip.String(), "0"), Logger: testLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.last.set(testSnapshot())
	a.listener.serve()
	for path, want := range map[string]int{"/metrics": 200, "/snapshot": 403, "/api/status": 403} {
		resp, err := http.Get("http://" + a.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("root from %s GET %s: %d, want %d", ip, path, resp.StatusCode, want)
		}
	}
	if !strings.Contains(logs.String(), "msg=listening_beyond_loopback") || !strings.Contains(logs.String(), "in clear text") {
		t.Errorf("no warning about clear text beyond loopback:\n%s", logs.String())
	}
}

func localNonLoopback() net.IP {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
			return n.IP
		}
	}
	return nil
}

// manySeries is a snapshot of n series of 20 non-empty buckets each, with
// pod labels, like metrics' scrape benchmark.
func manySeries(n int) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Version: snapshot.Version, Time: time.Now(), WindowNs: 10e9}
	for i := range n {
		durs := make([]uint64, 20)
		for j := range durs {
			durs[j] = uint64(1000) << (j % 20)
		}
		var sum uint64
		for _, d := range durs {
			sum += d
		}
		s.Series = append(s.Series, snapshot.Series{Span: fmt.Sprintf("span-%d", i%50), Identity: snapshot.Identity{Cgroup: fmt.Sprintf("/kubepods.slice/pod-%d/ctr-%d", i/50, i), Namespace: "shop", Pod: fmt.Sprintf("web-%d", i/50), Container: "server", Process: "web"},
			Count: 20, Errors: 1, SumNs: sum, MaxNs: durs[19], Histogram: snapshot.DurationHistogram(durs)})
	}
	return s
}

// sendGet sends GET path on a fresh connection owned by uid, and
// readStatus reads the status of its answer, without reading the body: a
// client that reads nothing holds its response in the listener.
func sendGet(t *testing.T, addr, path string, uid int) net.Conn {
	t.Helper()
	c, err := dialAs(uid)(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n\r\n", path)
	return c
}

func readStatus(t *testing.T, c net.Conn) int {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	head := make([]byte, 12) // "HTTP/1.1 200"
	if _, err := io.ReadFull(c, head); err != nil {
		t.Fatalf("GET: %v", err)
	}
	var code int
	fmt.Sscanf(string(head[9:]), "%d", &code)
	c.SetReadDeadline(time.Time{})
	return code
}

// getStatuses sends GET path from each uid at once, then reads the
// statuses.
func getStatuses(t *testing.T, addr, path string, uids ...int) ([]net.Conn, []int) {
	t.Helper()
	conns := make([]net.Conn, len(uids))
	for i, uid := range uids {
		conns[i] = sendGet(t, addr, path, uid)
	}
	codes := make([]int, len(uids))
	for i, c := range conns {
		codes[i] = readStatus(t, c)
	}
	return conns, codes
}

// TestListenerInFlight sends six /metrics requests at 10k series from six
// users at once, none reading its answer: two are written (max_in_flight),
// four get 503 at once, counted; a second request from a user already
// being served gets 503 too. The two that read nothing are cut off after
// the stall timeout, counted, and the slots serve again.
func TestListenerInFlight(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make sockets as other users")
	}
	// The stall timeout: long enough for the checks below to run while
	// the answers are held, under the race detector too.
	a, addr := serveAgent(t, t.TempDir(), "rules: []\n", manySeries(10000), nil, func(a *Agent) { a.listener.stall = 5 * time.Second })
	var held []net.Conn
	codes := map[int]int{}
	start := time.Now()
	conns, statuses := getStatuses(t, addr, "/metrics", 1000, 1001, 1002, 1003, 1004, 1005)
	for i, c := range conns {
		codes[statuses[i]]++
		if statuses[i] == 200 {
			held = append(held, c)
		} else {
			c.Close()
		}
	}
	took := time.Since(start)
	if codes[200] != 2 || codes[503] != 4 {
		t.Fatalf("answers %v, want 2 200 and 4 503", codes)
	}
	if got := counterValue(t, a, "spanwatch_listener_rejected_total", map[string]string{"handler": "/metrics", "reason": "busy"}); got != 4 {
		t.Errorf("rejected{busy} = %v, want 4", got)
	}
	t.Logf("six requests answered in %s", took)
	// A user being served asks again while its first answer is held.
	var served int
	for i, code := range statuses {
		if code == 200 {
			served = 1000 + i
		}
	}
	again := sendGet(t, addr, "/metrics", served)
	if code := readStatus(t, again); code != 503 {
		t.Errorf("second request of a user being served: %d, want 503", code)
	}
	again.Close()
	if got := counterValue(t, a, "spanwatch_listener_rejected_total", map[string]string{"handler": "/metrics", "reason": "client_busy"}); got != 1 {
		t.Errorf("rejected{client_busy} = %v, want 1", got)
	}
	// The held responses are cut off once they stall.
	deadline := time.Now().Add(15 * time.Second)
	for counterValue(t, a, "spanwatch_listener_write_timeouts_total", map[string]string{"handler": "/metrics"}) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the stalled responses were not cut off")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range held {
		c.Close()
	}
	resp, err := clientAs(1007).Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || n < 1<<20 {
		t.Errorf("after the cut-off: %d, %d bytes", resp.StatusCode, n)
	}
}

// TestListenerSlowReaders opens five real TCP connections as nobody that
// ask for /metrics at 10k series and read one byte a second: one is
// answered (one response per client), four get 503; the answered one is
// cut off once it stalls (its client sees that only after reading what
// the kernel buffered, but the agent has dropped it); meanwhile another
// client (Prometheus, as root) gets its whole answer.
func TestListenerSlowReaders(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make sockets as nobody")
	}
	a, addr := serveAgent(t, t.TempDir(), "rules: []\n", manySeries(10000), nil, func(a *Agent) { a.listener.stall = 2 * time.Second })
	stop := make(chan struct{})
	var wg sync.WaitGroup
	codes := map[int]int{}
	start := time.Now()
	conns, statuses := getStatuses(t, addr, "/metrics", nobody, nobody, nobody, nobody, nobody)
	for i, c := range conns {
		codes[statuses[i]]++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			b := make([]byte, 1)
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Second):
				}
				c.SetReadDeadline(time.Now().Add(time.Second))
				if _, err := c.Read(b); err != nil && !os.IsTimeout(err) {
					return
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	if codes[200] != 1 || codes[503] != 4 {
		t.Errorf("slow readers got %v, want one 200 and four 503 (one response per client)", codes)
	}
	// Prometheus scrapes meanwhile.
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || n < 1<<20 {
		t.Errorf("a scrape beside the slow readers: %d, %d bytes", resp.StatusCode, n)
	}
	for counterValue(t, a, "spanwatch_listener_write_timeouts_total", map[string]string{"handler": "/metrics"}) < 1 {
		if time.Since(start) > 20*time.Second {
			t.Fatal("the slow reader's response was not cut off within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the slow reader's response was cut off %s after it began (stall timeout %s)", time.Since(start).Round(100*time.Millisecond), a.listener.stall)
}

// TestListenerDeadLettersRedacted refuses every notification at a real
// receiver that echoes its Authorization header and URL in its 400 body:
// GET /api/dead-letters serves the refusal without the bearer token or
// the URL's secret query value, which the receiver did get.
func TestListenerDeadLettersRedacted(t *testing.T) {
	const token, key = "tok-3f9a1c77e0", "qk-8d2e55b1"
	var mu sync.Mutex
	var seen []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization")+" "+r.URL.RawQuery)
		mu.Unlock()
		http.Error(w, fmt.Sprintf("invalid credentials %q for %s", r.Header.Get("Authorization"), r.URL), http.StatusUnauthorized)
	}))
	defer hook.Close()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf(`
rules:
  - {name: Busy, span: checkout, when: count > 10}
webhooks:
  - name: ops
    url: %s/hook?api_key=%s
    bearer_token_file: %s
    group_wait: 0s
routing:
  outbox: {path: %s}
`, hook.URL, key, tokenFile, filepath.Join(dir, "outbox.db"))
	a, addr := serveAgent(t, dir, text, nil, nil)
	if _, err := a.det.Evaluate(context.Background(), testSnapshot()); err != nil {
		t.Fatal(err)
	}
	var body string
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(body, "invalid credentials"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no dead letter: %s", body)
		}
		resp, err := http.Get("http://" + addr + "/api/dead-letters")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
	}
	mu.Lock()
	got := strings.Join(seen, "\n")
	mu.Unlock()
	if !strings.Contains(got, token) || !strings.Contains(got, key) {
		t.Fatalf("the receiver did not get the secrets: %s", got)
	}
	for _, sec := range []string{token, key} {
		if strings.Contains(body, sec) {
			t.Errorf("/api/dead-letters holds %s:\n%s", sec, body)
		}
	}
	var dead []notify.DeadLetter
	if err := json.Unmarshal([]byte(body), &dead); err != nil || len(dead) != 1 || !strings.Contains(dead[0].Error, notify.Redacted) {
		t.Errorf("/api/dead-letters: nothing redacted (%v):\n%s", err, body)
	}
}

// TestStatusPolicyCutOff evaluates a policy whose memory follows a count a
// user drove to 10^8: GET /api/status lists it as cut off at its memory
// bound, and /metrics counts it.
func TestStatusPolicyCutOff(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big.rego"), []byte(`package spanwatch

alerts contains {"labels": {"alertname": "Counted"}} if {
	some s in input.series
	count(numbers.range(1, s.count)) > 10
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	a, addr := serveAgent(t, dir, "policies:\n  - file: big.rego\npolicy_limits: {memory: 32MiB}\n", nil, nil)
	s := testSnapshot()
	s.Series[0].Count = 1e8
	if _, err := a.det.Evaluate(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/api/status")
	if err != nil {
		t.Fatal(err)
	}
	var st Status
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || len(st.PoliciesCutOff) != 1 || st.PoliciesCutOff[0].Policy != "big" || st.PoliciesCutOff[0].Reason != "memory" || st.PoliciesCutOff[0].Limit != "32MiB" {
		t.Errorf("/api/status: %v %+v", err, st.PoliciesCutOff)
	}
	if got := counterValue(t, a, "spanwatch_detector_policy_memory_cutoffs_total", nil); got != 1 {
		t.Errorf("spanwatch_detector_policy_memory_cutoffs_total = %v", got)
	}
}
