package config

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/prometheus/exporter-toolkit/web"
	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
)

// Defaults and bounds of the listener: section.
const (
	// DefaultMaxInFlight is how many responses each heavy endpoint
	// (/metrics, /snapshot, /api/*) writes at once. A /metrics response
	// at 10k series holds about 80 MB until it is written; two let a
	// Prometheus HA pair scrape at the same moment.
	DefaultMaxInFlight = 2
	MaxMaxInFlight     = 64
	// DefaultWriteTimeout bounds the writing of one response, from the end
	// of its request's headers; a client that reads nothing for the
	// listener's stall timeout is cut off before that.
	DefaultWriteTimeout = 30 * time.Second
	MinWriteTimeout     = time.Second
	MaxWriteTimeout     = 10 * time.Minute
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

// listenerSettings are the rows of the listener: section; none is live.
var listenerSettings = &settings[ListenerSettings]{section: "listener", rows: []*setting[ListenerSettings]{
	{key: "web_config_file", kind: kindPath,
		def: "none: plain HTTP without authentication", doc: "a Prometheus exporter web configuration file (TLS, basic_auth_users, http_server_config), relative to the configuration file; --web.config.file overrides it",
		field: func(s *ListenerSettings) any { return &s.WebConfigFile }},
	{key: "max_in_flight", kind: kindInt, min: 1, max: MaxMaxInFlight,
		def: fmt.Sprint(DefaultMaxInFlight), doc: "responses each heavy endpoint (/metrics, /snapshot, /api/*) writes at once; past it a request gets 503",
		field: func(s *ListenerSettings) any { return &s.MaxInFlight }},
	{key: "write_timeout", kind: kindDuration, min: int64(MinWriteTimeout), max: int64(MaxWriteTimeout),
		def: DefaultWriteTimeout.String(), doc: "how long the writing of one response may take",
		field: func(s *ListenerSettings) any { return &s.WriteTimeout }},
	{key: "kernel_addresses", kind: kindBool,
		def: "false", doc: "serve the raw addresses of kernel stack frames to authenticated clients (otherwise 0: an address defeats KASLR)",
		field: func(s *ListenerSettings) any { return &s.KernelAddresses }},
}}

// decodeListener decodes the listener: section (n nil: none); a relative
// web_config_file is taken from dir.
func decodeListener(d *section.Decoder, n *yaml.Node, dir string) decoded[ListenerSettings] {
	l := listenerSettings.decode(d, n, ListenerSettings{MaxInFlight: DefaultMaxInFlight, WriteTimeout: DefaultWriteTimeout})
	if f := l.values.WebConfigFile; f != "" && !filepath.IsAbs(f) && dir != "" {
		l.values.WebConfigFile = filepath.Join(dir, f)
	}
	return l
}

// checkWebConfig lays --web.config.file (flagFile) over the file's
// web_config_file and checks the result with exporter-toolkit's own check:
// the YAML (strictly), the users' bcrypt hashes, the certificate and key,
// the client CAs.
func checkWebConfig(d *section.Decoder, l *decoded[ListenerSettings], flagFile string) {
	at := l.at["web_config_file"]
	if flagFile != "" {
		l.values.WebConfigFile, at = flagFile, nil
	}
	f := l.values.WebConfigFile
	if f == "" {
		return
	}
	if err := web.Validate(f); err != nil {
		msg := fmt.Sprintf("web configuration %s: %v", f, err)
		if at != nil {
			d.Errorf(at, "listener.web_config_file: %s", msg)
		} else {
			d.Flag("--web.config.file: %s", msg)
		}
	}
}
