package otlp

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/duration"
)

// Config is the otlp: section: where overrun records go as OTLP log
// records, and with profiles: true their stacks as OTLP profiles.
//
//	otlp:
//	  endpoint: http://otel-collector:4318   # OTLP/HTTP; records go to ENDPOINT/v1/logs
//	  headers: {x-team: shop}                # sent with every request
//	  bearer_token_file: /etc/spanwatch/otlp-token   # read at each request
//	  timeout: 10s                           # per request (default 10s)
//	  queue_size: 4096                       # records held while the endpoint is slow (default 4096)
//	  profiles: true                         # stacks as OTLP profiles too, to ENDPOINT/v1development/profiles (default false)
type Config struct {
	// Endpoint is the OTLP/HTTP base URL (http or https); records are
	// posted to Endpoint + "/v1/logs", as OTEL_EXPORTER_OTLP_ENDPOINT
	// has it.
	Endpoint string
	// Headers are sent with every request.
	Headers map[string]string
	// BearerTokenFile, when set, is read at each request and sent as
	// "Authorization: Bearer TOKEN".
	BearerTokenFile string
	// Timeout bounds each request (DefaultTimeout when 0).
	Timeout time.Duration
	// QueueSize bounds the records waiting to be sent (DefaultQueueSize
	// when 0); a record that finds the queue full is dropped and counted.
	QueueSize int
	// Profiles sends each batch also as an OTLP profile (the
	// experimental v1development profiles signal) to Endpoint +
	// "/v1development/profiles": a sample an overrun, on its stack.
	Profiles bool
}

// Defaults.
const (
	DefaultTimeout   = 10 * time.Second
	DefaultQueueSize = 4096
	MaxQueueSize     = 1 << 20
)

// Decode decodes the otlp: section (n nil or a zero Node: the file has
// none, and Decode returns nil), reporting every mistake into d as
// "file:line:col: message".
func Decode(d *section.Decoder, n *yaml.Node) *Config {
	if n == nil || n.Kind == 0 {
		return nil
	}
	n = section.Resolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	cfg := &Config{}
	fail := func(at *yaml.Node, format string, a ...any) {
		d.Errorf(at, "otlp: %s", fmt.Sprintf(format, a...))
	}
	str := func(v *yaml.Node, what string) (string, bool) {
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" || v.Value == "" {
			fail(v, "%s must be a non-empty string", what)
			return "", false
		}
		return v.Value, true
	}
	hasEndpoint := false
	ok := d.Fields(n, "otlp", []string{"endpoint", "headers", "bearer_token_file", "timeout", "queue_size", "profiles"}, func(key string, k, v *yaml.Node) {
		switch key {
		case "endpoint":
			hasEndpoint = true
			s, ok := str(v, "endpoint")
			if !ok {
				return
			}
			if err := checkEndpoint(s); err != nil {
				fail(v, "endpoint: %v", err)
				return
			}
			cfg.Endpoint = strings.TrimSuffix(s, "/")
		case "headers":
			if v.Kind != yaml.MappingNode {
				fail(v, "headers must be a mapping of header names to values")
				return
			}
			cfg.Headers = map[string]string{}
			for i := 0; i+1 < len(v.Content); i += 2 {
				hk, hv := v.Content[i], v.Content[i+1]
				name, ok := str(hk, "a header name")
				if !ok {
					continue
				}
				if !validHeaderName(name) {
					fail(hk, "header name %q: want letters, digits and -", name)
					continue
				}
				if strings.EqualFold(name, "Content-Type") || strings.EqualFold(name, "Content-Length") {
					fail(hk, "header %s is set by spanwatch", name)
					continue
				}
				if hv.Kind != yaml.ScalarNode || strings.ContainsAny(hv.Value, "\r\n") {
					fail(hv, "header %s: want a one-line string", name)
					continue
				}
				cfg.Headers[name] = hv.Value
			}
		case "bearer_token_file":
			cfg.BearerTokenFile, _ = str(v, "bearer_token_file")
		case "timeout":
			if v.Kind != yaml.ScalarNode {
				fail(v, "timeout must be a duration like 10s")
				return
			}
			t, err := duration.Parse(v.Value)
			if err != nil || t <= 0 {
				fail(v, "timeout %q: want a positive duration like 10s", v.Value)
				return
			}
			cfg.Timeout = t
		case "queue_size":
			var q int
			if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(&q) != nil || q < 1 || q > MaxQueueSize {
				fail(v, "queue_size must be a whole number from 1 to %d", MaxQueueSize)
				return
			}
			cfg.QueueSize = q
		case "profiles":
			if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&cfg.Profiles) != nil {
				fail(v, "profiles must be true or false")
			}
		}
	})
	if !ok {
		return nil
	}
	if !hasEndpoint {
		fail(n, "missing endpoint (e.g. http://otel-collector:4318)")
	}
	return cfg
}

func checkEndpoint(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return fmt.Errorf("want a URL like http://otel-collector:4318")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme must be http or https (OTLP/HTTP)")
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("no user info, query or fragment: put credentials in headers or bearer_token_file")
	}
	return nil
}

func validHeaderName(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return s != ""
}
