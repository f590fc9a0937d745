//go:build linux

package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"

	"golang.org/x/crypto/bcrypt"
	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/internal/sockdiag"
)

// Who may read what. /metrics, /-/healthy and /-/ready are served to
// every client the web configuration lets in (Prometheus' convention: an
// exporter's metrics are for whoever can scrape it). /snapshot and /api/* hold every
// process's stacks, pids, cgroups and the alerts' contents: they are
// served only to a client that proved who it is, one of
//
//   - a basic-auth user of the web configuration file (basic_auth_users),
//   - a client certificate verified against its client CAs,
//   - a connection over loopback from a socket owned by root or by the
//     agent's own user (the kernel says who owns the client's socket:
//     package sockdiag), which covers kubectl exec and port-forward and
//     an operator on the node, and refuses the node's other users.
//
// Anyone else gets 403, counted in spanwatch_listener_rejected_total.

// maxWebConfigBytes bounds the web configuration file read at each
// request to a sensitive endpoint.
const maxWebConfigBytes = 1 << 20

// webConfig is what the listener reads of a web configuration file
// itself; exporter-toolkit reads and enforces the whole of it.
type webConfig struct {
	TLS struct {
		Cert       string `yaml:"cert"`
		CertFile   string `yaml:"cert_file"`
		ClientAuth string `yaml:"client_auth_type"`
	} `yaml:"tls_server_config"`
	Users map[string]string `yaml:"basic_auth_users"`
}

func readWebConfig(path string) (*webConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxWebConfigBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxWebConfigBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxWebConfigBytes)
	}
	var c webConfig
	if err := yaml.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}

// tlsEnabled and authentication describe a web configuration for logs.
func (c *webConfig) tlsEnabled() bool { return c != nil && (c.TLS.Cert != "" || c.TLS.CertFile != "") }

func (c *webConfig) authentication() string {
	var out string
	if c != nil && len(c.Users) > 0 {
		out = "basic_auth"
	}
	if c != nil && (c.TLS.ClientAuth == "RequireAndVerifyClientCert" || c.TLS.ClientAuth == "VerifyClientCertIfGiven") {
		if out != "" {
			out += "+"
		}
		out += "client_certificates"
	}
	if out == "" {
		return "none"
	}
	return out
}

// access decides who may read the sensitive endpoints.
type access struct {
	webFile string // "" without a web configuration
	euid    uint32

	mu    sync.Mutex // serializes bcrypt, which is CPU-heavy by design
	cache map[[sha256.Size]byte]bool
}

// maxAuthCache bounds the remembered outcomes of password checks.
const maxAuthCache = 256

// identify says who the client of r proved to be ("basic_auth user X",
// "client certificate CN", "uid 0 over loopback"), or returns an error
// saying why it proved nothing.
func (a *access) identify(r *http.Request) (string, error) {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		return "client certificate " + r.TLS.VerifiedChains[0][0].Subject.CommonName, nil
	}
	if a.webFile != "" {
		// exporter-toolkit checked the password before this handler ran;
		// it is checked again against the file as it is now, so a user
		// added between its read and this one proves nothing unchecked.
		c, err := readWebConfig(a.webFile)
		if err != nil {
			return "", fmt.Errorf("read web configuration: %w", err)
		}
		if len(c.Users) > 0 {
			user, pass, ok := r.BasicAuth()
			if ok && a.checkPassword(user, pass, c.Users[user]) {
				return "basic_auth user " + user, nil
			}
			return "", errors.New("no valid basic auth credentials")
		}
	}
	ci, _ := r.Context().Value(connKey{}).(*connInfo)
	if ci == nil {
		return "", errors.New("unknown connection")
	}
	uid, err := ci.peerUID()
	if err != nil {
		return "", err
	}
	if uid != 0 && uid != a.euid {
		return "", fmt.Errorf("the client is uid %d on this host, not root", uid)
	}
	return fmt.Sprintf("uid %d over loopback", uid), nil
}

// checkPassword compares a password with its bcrypt hash, remembering
// the outcome (keyed by a digest of the three, as exporter-toolkit does).
func (a *access) checkPassword(user, pass, hash string) bool {
	if hash == "" {
		return false
	}
	key := sha256.Sum256([]byte(user + "\x00" + hash + "\x00" + pass))
	a.mu.Lock()
	defer a.mu.Unlock()
	if ok, seen := a.cache[key]; seen {
		return ok
	}
	ok := bcrypt.CompareHashAndPassword([]byte(hash), []byte(pass)) == nil
	if a.cache == nil || len(a.cache) >= maxAuthCache {
		a.cache = map[[sha256.Size]byte]bool{}
	}
	a.cache[key] = ok
	return ok
}

// connKey holds a connection's connInfo in its requests' contexts.
type connKey struct{}

// connInfo is what the listener learns once per connection.
type connInfo struct {
	local, remote net.Addr
	once          sync.Once
	uid           uint32
	err           error
}

func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, &connInfo{local: c.LocalAddr(), remote: c.RemoteAddr()})
}

// peerUID is the owner of the client's socket, for a connection over
// loopback; an error for any other.
func (c *connInfo) peerUID() (uint32, error) {
	c.once.Do(func() {
		l, ok1 := c.local.(*net.TCPAddr)
		r, ok2 := c.remote.(*net.TCPAddr)
		if !ok1 || !ok2 || !l.IP.IsLoopback() || !r.IP.IsLoopback() {
			c.err = fmt.Errorf("the client %s is not on loopback", c.remote)
			return
		}
		c.uid, c.err = sockdiag.PeerUID(c.local, c.remote)
		if c.err != nil {
			c.err = fmt.Errorf("who owns the client's socket: %w", c.err)
		}
	})
	return c.uid, c.err
}
