//go:build linux

package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The hostile-user tests run clients as nobody: a copy of this test
// binary, started as uid 65534, that makes HTTP requests
// (SPANWATCH_TEST_GET) and prints what it got; and sockets created by
// this process on a thread whose fsuid is another user's, which the
// kernel stamps with that user (what the listener asks sock_diag).

const nobody = 65534

// clientResult is what the client run as nobody prints for each URL.
type clientResult struct {
	URL   string `json:"url"`
	Code  int    `json:"code"`
	Body  string `json:"body"`
	Error string `json:"error,omitempty"`
}

// clientMain is the test binary as an HTTP client: GET each URL of
// SPANWATCH_TEST_GET (space-separated), with basic auth
// (SPANWATCH_TEST_USER, SPANWATCH_TEST_PASS), a CA (SPANWATCH_TEST_CA)
// and a client certificate (SPANWATCH_TEST_CERT, SPANWATCH_TEST_KEY)
// when given; one JSON line per URL on stdout.
func clientMain() int {
	tc := &tls.Config{}
	if ca := os.Getenv("SPANWATCH_TEST_CA"); ca != "" {
		pemData, err := os.ReadFile(ca)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		tc.RootCAs = x509.NewCertPool()
		tc.RootCAs.AppendCertsFromPEM(pemData)
	}
	if cert := os.Getenv("SPANWATCH_TEST_CERT"); cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, os.Getenv("SPANWATCH_TEST_KEY"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		tc.Certificates = []tls.Certificate{kp}
	}
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	enc := json.NewEncoder(os.Stdout)
	for _, u := range strings.Fields(os.Getenv("SPANWATCH_TEST_GET")) {
		res := clientResult{URL: u}
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		if user := os.Getenv("SPANWATCH_TEST_USER"); user != "" {
			req.SetBasicAuth(user, os.Getenv("SPANWATCH_TEST_PASS"))
		}
		resp, err := client.Do(req)
		if err != nil {
			res.Error = err.Error()
		} else {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			res.Code, res.Body = resp.StatusCode, string(b)
		}
		enc.Encode(res)
	}
	return 0
}

var nobodyBin struct {
	once sync.Once
	dir  string
	err  error
}

// nobodyDir returns a directory nobody can read and list, holding a copy
// of this test binary (go test's own directory is root's alone); removed
// when the tests end (TestMain).
func nobodyDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as nobody")
	}
	nobodyBin.once.Do(func() {
		exe, err := os.Executable()
		if err != nil {
			nobodyBin.err = err
			return
		}
		dir, err := os.MkdirTemp("", "spanwatch-nobody-")
		if err != nil {
			nobodyBin.err = err
			return
		}
		nobodyBin.dir = dir
		if err := os.Chmod(dir, 0o755); err != nil {
			nobodyBin.err = err
			return
		}
		nobodyBin.err = copyFile(exe, filepath.Join(dir, "client"), 0o755)
	})
	if nobodyBin.err != nil {
		t.Fatal(nobodyBin.err)
	}
	return nobodyBin.dir
}

func removeNobodyDir() {
	if nobodyBin.dir != "" {
		os.RemoveAll(nobodyBin.dir)
	}
}

func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// getAsNobody runs the client as uid and gid 65534 and returns its
// results, one per URL. env adds SPANWATCH_TEST_* settings.
func getAsNobody(t *testing.T, env []string, urls ...string) []clientResult {
	t.Helper()
	cmd := exec.Command(filepath.Join(nobodyDir(t), "client"))
	cmd.Env = append([]string{"SPANWATCH_TEST_GET=" + strings.Join(urls, " ")}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	cmd.Dir = "/"
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client as nobody: %v\n%s", err, stderr.String())
	}
	var res []clientResult
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var r clientResult
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("client output: %v\n%s", err, out)
		}
		res = append(res, r)
	}
	if len(res) != len(urls) {
		t.Fatalf("client as nobody answered %d of %d URLs:\n%s\n%s", len(res), len(urls), out, stderr.String())
	}
	return res
}

// dialAs returns a dialer whose TCP sockets are owned by uid: each socket
// is created on a thread whose fsuid is uid for the call (the kernel
// stamps a new socket with its creator's fsuid), then connected.
func dialAs(uid int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ap, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			return nil, err
		}
		fd, err := socketAs(uid, ap.IP.To4() == nil)
		if err != nil {
			return nil, err
		}
		var sa unix.Sockaddr
		if ip4 := ap.IP.To4(); ip4 != nil {
			sa = &unix.SockaddrInet4{Port: ap.Port, Addr: [4]byte(ip4)}
		} else {
			sa = &unix.SockaddrInet6{Port: ap.Port, Addr: [16]byte(ap.IP.To16())}
		}
		if err := unix.Connect(fd, sa); err != nil {
			unix.Close(fd)
			return nil, err
		}
		f := os.NewFile(uintptr(fd), "tcp")
		defer f.Close()
		return net.FileConn(f)
	}
}

func socketAs(uid int, v6 bool) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, err := unix.SetfsuidRetUid(uid)
	if err != nil {
		return -1, err
	}
	defer unix.SetfsuidRetUid(prev)
	family := unix.AF_INET
	if v6 {
		family = unix.AF_INET6
	}
	return unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
}

// clientAs is an HTTP client whose connections are owned by uid.
func clientAs(uid int) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: dialAs(uid), DisableKeepAlives: true}}
}

// testPKI is a throwaway PKI in a directory nobody can read: a CA, a
// server certificate for 127.0.0.1, and a client certificate.
type testPKI struct {
	ca, serverCert, serverKey, clientCert, clientKey string
	pool                                             *x509.CertPool
	client                                           tls.Certificate
}

func newPKI(t *testing.T, dir string) *testPKI {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "spanwatch test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	pemOf := func(typ string, b []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}) }
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP) (certFile, keyFile string) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: ips,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, _ := x509.MarshalECPrivateKey(k)
		return write(cn+".pem", pemOf("CERTIFICATE", der)), write(cn+".key", pemOf("EC PRIVATE KEY", kd))
	}
	p := &testPKI{ca: write("ca.pem", pemOf("CERTIFICATE", caDER)), pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.serverCert, p.serverKey = leaf(2, "127.0.0.1", x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	p.clientCert, p.clientKey = leaf(3, "prometheus", x509.ExtKeyUsageClientAuth, nil)
	if p.client, err = tls.LoadX509KeyPair(p.clientCert, p.clientKey); err != nil {
		t.Fatal(err)
	}
	return p
}

// sharedDir returns a temporary directory every user may read (for the
// files a client run as nobody opens), removed when the test ends.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "spanwatch-shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
