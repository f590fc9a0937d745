package notify

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spanwatch/spanwatch/alert"
)

// referenceVerify implements the signature check from its definition in
// the package documentation alone: hex HMAC-SHA256 over "<timestamp>.<body>".
func referenceVerify(secret string, r *http.Request, body []byte) (ok bool, age time.Duration) {
	ts := r.Header.Get("X-Spanwatch-Timestamp")
	sig := r.Header.Get("X-Spanwatch-Signature")
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "." + string(body)))
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false, 0
	}
	return hmac.Equal([]byte(sig), []byte(want)), time.Since(time.Unix(sec, 0))
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSignatureAndCredentials checks the signature against the reference
// implementation, and that bearer and basic credentials come from files.
func TestSignatureAndCredentials(t *testing.T) {
	dir := t.TempDir()
	secret := writeFile(t, dir, "hmac.key", "s3cret-signing-key\n")
	token := writeFile(t, dir, "token", "tok-123\n")
	password := writeFile(t, dir, "password", "pa55word\n")
	tests := []struct {
		name     string
		extra    string
		wantAuth string
	}{
		{"hmac only", "hmac_secret_file: " + secret, ""},
		{"hmac and bearer", "hmac_secret_file: " + secret + "\nbearer_token_file: " + token, "Bearer tok-123"},
		{"basic", "basic_auth: {username: spanwatch, password_file: " + password + "}", "Basic c3BhbndhdGNoOnBhNTV3b3Jk"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var checked []string
			rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) bool {
				body, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(strings.NewReader(string(body)))
				mu.Lock()
				defer mu.Unlock()
				if got := r.Header.Get("Authorization"); got != tt.wantAuth {
					checked = append(checked, "authorization "+got)
				}
				if strings.Contains(tt.extra, "hmac") {
					ok, age := referenceVerify("s3cret-signing-key", r, body)
					if !ok || age > time.Minute || age < -time.Minute {
						checked = append(checked, "bad signature")
					}
					if err := Verify([]byte("s3cret-signing-key"), r.Header, body, time.Now(), DefaultSignatureTolerance); err != nil {
						checked = append(checked, "Verify: "+err.Error())
					}
					if err := Verify([]byte("s3cret-signing-key"), r.Header, append(body, ' '), time.Now(), DefaultSignatureTolerance); err != ErrBadSignature {
						checked = append(checked, "tampered body accepted")
					}
					if err := Verify([]byte("s3cret-signing-key"), r.Header, body, time.Now().Add(10*time.Minute), DefaultSignatureTolerance); err != ErrStale {
						checked = append(checked, "replay accepted")
					}
				} else if r.Header.Get(SignatureHeader) != "" {
					checked = append(checked, "signed without a secret")
				}
				return false
			}).start()
			d := mustNew(t, webhookConfig(t, rc.srv.URL, t.TempDir(), tt.extra))
			notifyOK(t, d, mkAlert("a", 1, alert.StateFiring, time.Now()))
			waitFor(t, 5*time.Second, "delivery", func() bool { return len(rc.messages()) == 1 })
			mu.Lock()
			defer mu.Unlock()
			if len(checked) > 0 {
				t.Errorf("receiver found: %v", checked)
			}
		})
	}
}

// TestSignKnownValue pins Sign to a value computed with another tool:
// printf '1700000000.{"a":1}' | openssl dgst -sha256 -hmac key
func TestSignKnownValue(t *testing.T) {
	got := Sign([]byte("key"), 1700000000, []byte(`{"a":1}`))
	if want := "sha256=a438e398bfafc57e4396bb7fc2304422f0f768e965d073ca313cb52e22e6ad03"; got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
}

// certs is a throwaway PKI: a CA, a server certificate for 127.0.0.1 and a
// client certificate.
type certs struct {
	caFile, clientCert, clientKey string
	server                        tls.Certificate
	pool                          *x509.CertPool
}

func newCerts(t *testing.T, dir string) certs {
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
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: ips,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	pemOf := func(typ string, b []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}) }
	srvDER, srvKey := leaf(2, "127.0.0.1", x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	cliDER, cliKey := leaf(3, "spanwatch", x509.ExtKeyUsageClientAuth, nil)
	srvKeyDER, _ := x509.MarshalECPrivateKey(srvKey)
	cliKeyDER, _ := x509.MarshalECPrivateKey(cliKey)
	server, err := tls.X509KeyPair(pemOf("CERTIFICATE", srvDER), pemOf("EC PRIVATE KEY", srvKeyDER))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return certs{
		caFile:     writeFile(t, dir, "ca.pem", string(pemOf("CERTIFICATE", caDER))),
		clientCert: writeFile(t, dir, "client.pem", string(pemOf("CERTIFICATE", cliDER))),
		clientKey:  writeFile(t, dir, "client.key", string(pemOf("EC PRIVATE KEY", cliKeyDER))),
		server:     server,
		pool:       pool,
	}
}

// TestMutualTLS delivers to an HTTPS receiver that requires a client
// certificate signed by a custom CA, and checks that without the CA the
// attempt fails as a connection error.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	c := newCerts(t, dir)
	rc := newReceiver(t, nil)
	rc.srv.TLS = &tls.Config{Certificates: []tls.Certificate{c.server}, ClientCAs: c.pool, ClientAuth: tls.RequireAndVerifyClientCert}
	rc.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	rc.srv.StartTLS()
	t.Cleanup(rc.srv.Close)

	tests := []struct {
		name   string
		tls    string
		wantOK bool
	}{
		{"custom CA and client certificate", "tls: {ca_file: " + c.caFile + ", cert_file: " + c.clientCert + ", key_file: " + c.clientKey + "}", true},
		{"no client certificate", "tls: {ca_file: " + c.caFile + "}", false},
		{"system roots only", "", false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := mustNew(t, webhookConfig(t, rc.srv.URL, t.TempDir(), tt.tls))
			before := len(rc.messages())
			notifyOK(t, d, mkAlert("tls", i, alert.StateFiring, time.Now()))
			if tt.wantOK {
				waitFor(t, 5*time.Second, "delivery over mutual TLS", func() bool { return len(rc.messages()) == before+1 })
				return
			}
			waitFor(t, 5*time.Second, "a failed attempt", func() bool { return d.Stats().Webhooks[0].Failures[ReasonConnection] > 0 })
			if len(rc.messages()) != before {
				t.Errorf("receiver accepted a notification it should have refused")
			}
		})
	}
}

// TestSecretsRedacted points a webhook with credentials in its URL at a
// dead address and at a failing receiver, and checks that no secret shows
// in errors, logs or stats.
func TestSecretsRedacted(t *testing.T) {
	dir := t.TempDir()
	token := writeFile(t, dir, "token", "BEARER-SECRET\n")
	hmacKey := writeFile(t, dir, "hmac", "HMAC-SECRET\n")
	secrets := []string{"USER-SECRET", "PASS-SECRET", "QUERY-SECRET", "BEARER-SECRET", "HMAC-SECRET"}
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nope", http.StatusBadRequest)
	}))
	defer failing.Close()
	for _, base := range []string{"http://127.0.0.1:1", failing.URL} {
		u := strings.Replace(base, "http://", "http://USER-SECRET:PASS-SECRET@", 1) + "/hook?token=QUERY-SECRET"
		var logs syncBuffer
		c := webhookConfig(t, u, t.TempDir(), "bearer_token_file: "+token+"\nhmac_secret_file: "+hmacKey+"\nmax_attempts: 2")
		d, err := New(c, Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		if err != nil {
			t.Fatal(err)
		}
		notifyOK(t, d, mkAlert("a", 1, alert.StateFiring, time.Now()))
		waitFor(t, 5*time.Second, "failures", func() bool {
			s := d.Stats().Webhooks[0]
			return s.Failures[ReasonExpired]+s.Failures[ReasonHTTP4xx] > 0
		})
		s := d.Stats().Webhooks[0]
		d.Close()
		_, resp, err := SendTest(t.Context(), c, "test")
		all := logs.String() + s.LastError + resp.Body
		if resp.Err != nil {
			all += resp.Err.Error()
		}
		if err != nil {
			all += err.Error()
		}
		if !strings.Contains(all, "xxxxx") {
			t.Errorf("no redacted URL in the errors, were they produced? %s", all)
		}
		for _, sec := range secrets {
			if strings.Contains(all, sec) {
				t.Errorf("secret %s leaked:\n%s", sec, all)
			}
		}
	}
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"https://alerts.example/hook", "https://alerts.example/hook"},
		{"https://u:p@alerts.example/hook?token=abc&x=1#frag", "https://xxxxx@alerts.example/hook?token=xxxxx&x=xxxxx"},
		{"http://[::1]:9093/api/v2/alerts?k=v", "http://[::1]:9093/api/v2/alerts?k=xxxxx"},
		{"http://bad host/%zz", "<unparseable url>"},
	}
	for _, tt := range tests {
		if got := RedactURL(tt.in); got != tt.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestURLFile reads the URL, secret query included, from a file at each
// attempt: a rewritten file takes effect without a restart.
func TestURLFile(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var tokens []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		tokens = append(tokens, r.URL.Query().Get("token"))
		if r.URL.Query().Get("token") != "NEW-SECRET" {
			http.Error(w, "stale token", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	urlFile := writeFile(t, dir, "url", srv.URL+"/hook?token=OLD-SECRET\n")
	c := parseYAML(t, fmt.Sprintf(`
webhooks:
  - name: test
    url_file: %s
    group_wait: 10ms
    min_backoff: 50ms
    max_backoff: 50ms
routing:
  outbox: {path: %q}
`, urlFile, filepath.Join(dir, "outbox.db")))
	var logs syncBuffer
	d, err := New(c, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	notifyOK(t, d, mkAlert("a", 1, alert.StateFiring, time.Now()))
	waitFor(t, 5*time.Second, "an attempt with the old URL", func() bool { mu.Lock(); defer mu.Unlock(); return len(tokens) > 0 })
	writeFile(t, dir, "url", srv.URL+"/hook?token=NEW-SECRET\n")
	waitFor(t, 5*time.Second, "delivery with the new URL", func() bool { return d.Stats().Webhooks[0].Delivered == 1 })
	if all := logs.String() + d.Stats().Webhooks[0].LastError; strings.Contains(all, "SECRET") {
		t.Errorf("the URL's secret leaked:\n%s", all)
	}
}

// TestCredentialFileLater starts with a bearer token file that does not
// exist yet: attempts fail as "credentials" and are retried, and the file,
// once written, is used without a restart.
func TestCredentialFileLater(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	var mu sync.Mutex
	var auth []string
	rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		return false
	}).start()
	d := mustNew(t, webhookConfig(t, rc.srv.URL, dir, "bearer_token_file: "+token))
	notifyOK(t, d, mkAlert("a", 1, alert.StateFiring, time.Now()))
	waitFor(t, 5*time.Second, "a credentials failure", func() bool { return d.Stats().Webhooks[0].Failures[ReasonCredentials] > 0 })
	if s := d.Stats().Webhooks[0]; !strings.Contains(s.LastError, "bearer_token_file") || rc.requests() != 0 {
		t.Errorf("last error %q, %d requests: want a bearer_token_file error and nothing sent", s.LastError, rc.requests())
	}
	writeFile(t, dir, "token", "late-token\n")
	waitFor(t, 5*time.Second, "delivery", func() bool { return len(rc.messages()) == 1 })
	mu.Lock()
	defer mu.Unlock()
	if auth[0] != "Bearer late-token" {
		t.Errorf("Authorization %q", auth[0])
	}
}
