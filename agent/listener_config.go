package agent

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/exporter-toolkit/web"
	"gopkg.in/yaml.v3"
)

// Defaults and bounds of the listener: section, and the listener's fixed
// limits.
const (
	// DefaultMaxInFlight is how many responses each heavy endpoint
	// (/metrics, /snapshot, /api/*) writes at once. A /metrics response
	// at 10k series holds about 80 MB until it is written; two let a
	// Prometheus HA pair scrape at the same moment.
	DefaultMaxInFlight = 2
	MaxMaxInFlight     = 64
	// DefaultWriteTimeout bounds the writing of one response, from the end
	// of its request's headers; a client that reads nothing for
	// StallTimeout is cut off before that.
	DefaultWriteTimeout = 30 * time.Second
	MinWriteTimeout     = time.Second
	MaxWriteTimeout     = 10 * time.Minute
	// StallTimeout cuts off a response whose client has accepted no bytes
	// for this long: a slow reader holds a response's memory for at most
	// this, not for the whole write timeout.
	StallTimeout = 10 * time.Second
	// ReadHeaderTimeout, ReadTimeout and IdleTimeout bound a request's
	// headers (and the TLS handshake), the whole request, and a kept-alive
	// connection's wait for its next request.
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 10 * time.Second
	IdleTimeout       = time.Minute
	// MaxHeaderBytes bounds a request's headers (net/http's default is
	// 1 MB).
	MaxHeaderBytes = 16 << 10
	// MaxConnections bounds the open connections; more wait in the
	// kernel's accept queue, costing the agent nothing.
	MaxConnections = 64
)

// ListenerSettings are the listener: section of the configuration file,
// with --web.config.file. A restart applies changes; the web
// configuration file's content (users, certificates) is read again at
// each request and handshake, as exporter-toolkit does.
type ListenerSettings struct {
	// WebConfigFile is a Prometheus exporter web configuration file
	// (exporter-toolkit's format: tls_server_config, basic_auth_users,
	// http_server_config): TLS, client certificates and basic
	// authentication. Empty: plain HTTP without authentication.
	WebConfigFile string
	// MaxInFlight is how many responses each heavy endpoint writes at
	// once; past it a request gets 503 at once, counted in
	// spanwatch_listener_rejected_total{reason="busy"}.
	MaxInFlight int
	// WriteTimeout bounds the writing of one response.
	WriteTimeout time.Duration
	// KernelAddresses serves the raw addresses of kernel stack frames to
	// authenticated clients (by default every client gets 0: symbol names
	// and offsets only, since an address defeats KASLR).
	KernelAddresses bool
}

// listenerKeys are the keys of the listener: section.
var listenerKeys = []string{"web_config_file", "max_in_flight", "write_timeout", "kernel_addresses"}

// decodeListener decodes and validates the listener: section; a relative
// web_config_file is taken from dir. flagFile, when set, replaces the
// file's web_config_file (--web.config.file).
func decodeListener(ec *errorCollector, n *yaml.Node, dir, flagFile string) ListenerSettings {
	s := ListenerSettings{MaxInFlight: DefaultMaxInFlight, WriteTimeout: DefaultWriteTimeout}
	var fileAt *yaml.Node
	if n != nil && n.Kind != 0 {
		n = deref(n)
		switch {
		case n.Kind == yaml.ScalarNode && n.Tag == "!!null":
		case n.Kind != yaml.MappingNode:
			ec.at(n.Line, n.Column, "listener must be a mapping of settings (%s), not %s", strings.Join(listenerKeys, ", "), kindName(n))
		default:
			seen := map[string]bool{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := deref(n.Content[i]), deref(n.Content[i+1])
				if k.Kind != yaml.ScalarNode || !slices.Contains(listenerKeys, k.Value) {
					ec.at(k.Line, k.Column, "listener: unknown key %q (known: %s)", k.Value, strings.Join(listenerKeys, ", "))
					continue
				}
				if seen[k.Value] {
					ec.at(k.Line, k.Column, "listener: %s given twice", k.Value)
					continue
				}
				seen[k.Value] = true
				bad := func(format string, a ...any) {
					ec.at(v.Line, v.Column, "listener.%s: %s", k.Value, fmt.Sprintf(format, a...))
				}
				switch k.Value {
				case "web_config_file":
					if v.Kind != yaml.ScalarNode || v.Tag != "!!str" || v.Value == "" {
						bad("want the path of a web configuration file (TLS, basic_auth_users), not %s", kindName(v))
						continue
					}
					s.WebConfigFile, fileAt = v.Value, v
					if !filepath.IsAbs(s.WebConfigFile) && dir != "" {
						s.WebConfigFile = filepath.Join(dir, s.WebConfigFile)
					}
				case "max_in_flight":
					if x, ok := integer(v, bad); ok {
						if x < 1 || x > MaxMaxInFlight {
							bad("%d is out of range: want 1 to %d responses at once per endpoint (default %d)", x, MaxMaxInFlight, DefaultMaxInFlight)
						} else {
							s.MaxInFlight = int(x)
						}
					}
				case "write_timeout":
					if d, ok := duration(v, bad); ok {
						if d < MinWriteTimeout || d > MaxWriteTimeout {
							bad("%s is out of range: want %s to %s (default %s)", d, MinWriteTimeout, MaxWriteTimeout, DefaultWriteTimeout)
						} else {
							s.WriteTimeout = d
						}
					}
				case "kernel_addresses":
					s.KernelAddresses, _ = boolean(v, bad)
				}
			}
		}
	}
	if flagFile != "" {
		s.WebConfigFile, fileAt = flagFile, nil
	}
	if s.WebConfigFile != "" {
		// exporter-toolkit's own check: the YAML (strictly), the users'
		// bcrypt hashes, the certificate and key, the client CAs.
		if err := web.Validate(s.WebConfigFile); err != nil {
			msg := fmt.Sprintf("web configuration %s: %v", s.WebConfigFile, err)
			if fileAt != nil {
				ec.at(fileAt.Line, fileAt.Column, "listener.web_config_file: %s", msg)
			} else {
				ec.flag("--web.config.file: %s", msg)
			}
		}
	}
	return s
}
