package notify

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
)

// Format selects how a webhook's request body is built.
type Format string

const (
	// FormatAlertmanager posts Alertmanager's webhook payload, version "4".
	FormatAlertmanager Format = "alertmanager"
	// FormatAlertmanagerAPI posts a list of postable alerts to a real
	// Alertmanager's /api/v2/alerts. Resolved alerts are always sent (with
	// their endsAt), whatever send_resolved says, or Alertmanager would only
	// learn of the resolution when its resolve_timeout expires.
	FormatAlertmanagerAPI Format = "alertmanager-api"
	// FormatTemplate executes a Go text/template over the webhook payload
	// (a Message) and posts the result.
	FormatTemplate Format = "template"
)

// Defaults for keys left out of a webhook.
const (
	DefaultTimeout        = 10 * time.Second
	DefaultGroupWait      = 30 * time.Second
	DefaultGroupInterval  = 5 * time.Minute
	DefaultRepeatInterval = 4 * time.Hour
	// DefaultAPIRepeatInterval is the repeat_interval of an
	// alertmanager-api webhook: shorter than Alertmanager's default
	// resolve_timeout (5m), so alerts that still fire stay active there.
	DefaultAPIRepeatInterval = time.Minute
	DefaultMaxAge            = 24 * time.Hour
	DefaultMinBackoff        = 500 * time.Millisecond
	DefaultMaxBackoff        = time.Minute
	DefaultOutboxPath        = "/var/lib/spanwatch/outbox.db"
	DefaultOutboxMaxEntries  = 10000
)

// Config is the notification part of spanwatch's configuration file: the
// top-level webhooks: list and the routing: section.
type Config struct {
	Webhooks []Webhook
	Routing  Routing
	// File is the configuration file's name, used in error messages.
	File string
}

// Routing holds what applies to all webhooks.
type Routing struct {
	meta
	// Outbox is where alerts wait until they are delivered.
	Outbox Outbox `yaml:"outbox"`
	// ExternalURL is sent as the payload's externalURL, e.g. a link to a
	// dashboard for this host. The agent sets it to its own external URL
	// (top-level external_url:, where alerts' generatorURLs point) when it
	// is left out.
	ExternalURL string `yaml:"external_url"`
}

// Outbox configures the durable outbox.
type Outbox struct {
	meta
	// Path of the bbolt file. Its directory must exist.
	Path string `yaml:"path"`
	// MaxEntries bounds the alerts and queued notifications kept in the
	// outbox. Alerts beyond it are refused (Notify returns an error and the
	// overflow counter grows), never dropped silently.
	MaxEntries int `yaml:"max_entries"`
}

// A Webhook is one receiver of notifications.
type Webhook struct {
	meta
	Name string `yaml:"name"`
	// URL receives the POST requests; URLFile names a file holding it
	// instead, for URLs that embed a secret.
	URL     string `yaml:"url"`
	URLFile string `yaml:"url_file"`
	Format  Format `yaml:"format"`
	// Template is a Go text/template over Message, for FormatTemplate.
	Template string `yaml:"template"`
	// ContentType of the request body; application/json by default.
	ContentType string `yaml:"content_type"`
	// Match restricts the webhook to alerts whose labels have these exact
	// values. Empty means every alert.
	Match map[string]string `yaml:"match"`
	// Timeout bounds one delivery attempt.
	Timeout      Duration `yaml:"timeout"`
	SendResolved bool     `yaml:"send_resolved"`
	// GroupBy lists the labels that split alerts into groups; "..." alone
	// groups by all labels (one alert per group). Default: [alertname].
	GroupBy        []string `yaml:"group_by"`
	GroupWait      Duration `yaml:"group_wait"`
	GroupInterval  Duration `yaml:"group_interval"`
	RepeatInterval Duration `yaml:"repeat_interval"`
	// MaxAlerts caps the alerts in one notification (0: no cap); the rest
	// are counted in the payload's truncatedAlerts.
	MaxAlerts int `yaml:"max_alerts"`
	// MaxAge is how long a notification is retried before it is given up
	// (counted as failure reason "expired" and logged). 0 retries forever.
	MaxAge Duration `yaml:"max_age"`
	// MaxAttempts gives up after this many attempts (0: no limit), counted
	// since the agent started: a restart gives a notification a fresh
	// count, while MaxAge runs on.
	MaxAttempts int `yaml:"max_attempts"`
	// MinBackoff and MaxBackoff bound the exponential backoff between
	// attempts; the wait doubles from MinBackoff, with jitter.
	MinBackoff Duration `yaml:"min_backoff"`
	MaxBackoff Duration `yaml:"max_backoff"`

	HMACSecretFile  string     `yaml:"hmac_secret_file"`
	BearerTokenFile string     `yaml:"bearer_token_file"`
	BasicAuth       *BasicAuth `yaml:"basic_auth"`
	TLS             *TLSConfig `yaml:"tls"`
}

// BasicAuth sends HTTP basic credentials; the password is read from a file
// at each attempt, so it can be rotated without a restart.
type BasicAuth struct {
	meta
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
}

// TLSConfig configures the client side of HTTPS.
type TLSConfig struct {
	meta
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// Decode decodes the webhooks: and routing: sections of d's file (either
// may be nil or a zero Node: a section the file does not have), applies
// the defaults and validates the result, and with checkFiles runs
// CheckFiles too, reporting every problem into d. It returns nil when a
// section does not decode or validate. Package config calls it for the
// configuration file.
func Decode(d *section.Decoder, webhooks, routing *yaml.Node, checkFiles bool) *Config {
	before := d.Len()
	c := decodeConfig(d, webhooks, routing)
	if c == nil {
		return nil
	}
	d.Add(c.Validate())
	if checkFiles {
		d.Add(c.CheckFiles())
	}
	if d.Len() > before {
		return nil
	}
	return c
}

// ParseConfig is Decode for the sections' nodes alone, without CheckFiles:
// what tests and tools that hold the nodes use. Errors read
// "file:line:col: message".
func ParseConfig(filename string, webhooks, routing *yaml.Node) (*Config, error) {
	d := section.NewDecoder(filename, nil)
	c := Decode(d, webhooks, routing, false)
	return c, d.Err()
}

// decodeConfig decodes the sections and applies the defaults.
func decodeConfig(sd *section.Decoder, webhooks, routing *yaml.Node) *Config {
	c := &Config{File: sd.File}
	d := &decoder{file: sd.File}
	// A nil or zero Node (Kind 0) is a section the file does not have.
	// Both sections are decoded, so that the mistakes of both are
	// reported at once; Validate runs only on what decoded.
	var errs []error
	if webhooks != nil && webhooks.Kind != 0 {
		errs = append(errs, d.decode(webhooks, reflect.ValueOf(&c.Webhooks).Elem()))
	}
	if routing != nil && routing.Kind != 0 {
		errs = append(errs, d.decode(routing, reflect.ValueOf(&c.Routing).Elem()))
	}
	if err := errors.Join(errs...); err != nil {
		sd.Add(err)
		return nil
	}
	c.applyDefaults()
	return c
}

// ParseConfigFile decodes the webhooks: and routing: sections of a spanwatch
// configuration file whose content is data, without CheckFiles, leaving its
// other sections alone: what the notify commands and tests use. Package
// config reads the whole file for spanwatch check and run.
func ParseConfigFile(filename string, data []byte) (*Config, error) {
	root, perr := section.ParseDocument(filename, data)
	if perr != nil {
		return nil, section.ErrorList{perr}
	}
	d := section.NewDecoder(filename, data)
	var webhooks, routing *yaml.Node
	if root != nil {
		d.Fields(root, "rule file", nil, func(key string, _, v *yaml.Node) {
			switch key {
			case "webhooks":
				webhooks = v
			case "routing":
				routing = v
			}
		})
	}
	if d.Len() > 0 {
		return nil, d.Err()
	}
	return ParseConfig(filename, webhooks, routing)
}

func (c *Config) applyDefaults() {
	if !c.Routing.Outbox.isSet("path") {
		c.Routing.Outbox.Path = DefaultOutboxPath
	}
	if !c.Routing.Outbox.isSet("max_entries") {
		c.Routing.Outbox.MaxEntries = DefaultOutboxMaxEntries
	}
	for i := range c.Webhooks {
		c.Webhooks[i].applyDefaults()
	}
}

func (w *Webhook) applyDefaults() {
	setDur := func(key string, d *Duration, v time.Duration) {
		if !w.isSet(key) {
			*d = Duration(v)
		}
	}
	if w.Format == "" {
		w.Format = FormatAlertmanager
	}
	if w.ContentType == "" {
		w.ContentType = "application/json"
	}
	if !w.isSet("send_resolved") {
		w.SendResolved = true
	}
	if !w.isSet("group_by") {
		w.GroupBy = []string{"alertname"}
	}
	setDur("timeout", &w.Timeout, DefaultTimeout)
	setDur("group_wait", &w.GroupWait, DefaultGroupWait)
	setDur("group_interval", &w.GroupInterval, DefaultGroupInterval)
	if w.Format == FormatAlertmanagerAPI {
		setDur("repeat_interval", &w.RepeatInterval, DefaultAPIRepeatInterval)
	} else {
		setDur("repeat_interval", &w.RepeatInterval, DefaultRepeatInterval)
	}
	setDur("max_age", &w.MaxAge, DefaultMaxAge)
	setDur("min_backoff", &w.MinBackoff, DefaultMinBackoff)
	setDur("max_backoff", &w.MaxBackoff, DefaultMaxBackoff)
}

var (
	webhookNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
	labelNameRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Validate reports every mistake in c, each located in the file.
func (c *Config) Validate() error {
	var errs []error
	errf := func(m *meta, key, format string, a ...any) {
		p := m.at(key)
		errs = append(errs, &section.Error{File: c.File, Line: p.Line, Col: p.Col, Msg: fmt.Sprintf(format, a...)})
	}
	ob := &c.Routing.Outbox
	if ob.Path == "" {
		errf(&ob.meta, "path", "outbox path is empty: set routing.outbox.path to a file in a directory spanwatch can write")
	}
	if ob.MaxEntries <= 0 {
		errf(&ob.meta, "max_entries", "outbox max_entries must be positive, got %d", ob.MaxEntries)
	}
	if c.Routing.ExternalURL != "" {
		if _, err := url.Parse(c.Routing.ExternalURL); err != nil {
			errf(&c.Routing.meta, "external_url", "invalid external_url")
		}
	}
	seen := map[string]bool{}
	for i := range c.Webhooks {
		w := &c.Webhooks[i]
		ef := func(key, format string, a ...any) { errf(&w.meta, key, format, a...) }
		switch {
		case w.Name == "":
			ef("name", "webhook has no name: add name: with a short identifier")
		case !webhookNameRE.MatchString(w.Name):
			ef("name", "webhook name %q must be letters, digits, '_', '.' or '-'", w.Name)
		case seen[w.Name]:
			ef("name", "webhook name %q used twice", w.Name)
		}
		seen[w.Name] = true
		switch {
		case w.URL == "" && w.URLFile == "":
			ef("url", "webhook %q has no url: set url: or url_file:", w.Name)
		case w.URL != "" && w.URLFile != "":
			ef("url_file", "webhook %q sets both url and url_file: keep one", w.Name)
		case w.URL != "":
			if err := checkURL(w.URL); err != nil {
				ef("url", "webhook %q: %v", w.Name, err)
			}
		}
		switch w.Format {
		case FormatAlertmanager, FormatAlertmanagerAPI:
			if w.Template != "" {
				ef("template", "webhook %q: template is only used with format: template", w.Name)
			}
		case FormatTemplate:
			if w.Template == "" {
				ef("format", "webhook %q: format: template needs a template:", w.Name)
			} else if _, err := parseTemplate(w.Name, w.Template); err != nil {
				ef("template", "webhook %q: %v", w.Name, err)
			}
		default:
			ef("format", "webhook %q: unknown format %q (use alertmanager, alertmanager-api or template)", w.Name, w.Format)
		}
		for k := range w.Match {
			if !labelNameRE.MatchString(k) {
				ef("match", "webhook %q: match: %q is not a label name", w.Name, k)
			}
		}
		for _, l := range w.GroupBy {
			if l == "..." {
				if len(w.GroupBy) > 1 {
					ef("group_by", "webhook %q: group_by: \"...\" (all labels) must stand alone", w.Name)
				}
			} else if !labelNameRE.MatchString(l) {
				ef("group_by", "webhook %q: group_by: %q is not a label name", w.Name, l)
			}
		}
		if w.Timeout <= 0 {
			ef("timeout", "webhook %q: timeout must be positive", w.Name)
		}
		if w.GroupInterval <= 0 {
			ef("group_interval", "webhook %q: group_interval must be positive", w.Name)
		}
		if w.RepeatInterval <= 0 {
			ef("repeat_interval", "webhook %q: repeat_interval must be positive", w.Name)
		}
		if w.MinBackoff <= 0 {
			ef("min_backoff", "webhook %q: min_backoff must be positive", w.Name)
		}
		if w.MaxBackoff < w.MinBackoff {
			ef("max_backoff", "webhook %q: max_backoff (%s) is below min_backoff (%s)", w.Name, w.MaxBackoff, w.MinBackoff)
		}
		if w.MaxAlerts < 0 {
			ef("max_alerts", "webhook %q: max_alerts must not be negative", w.Name)
		}
		if w.MaxAttempts < 0 {
			ef("max_attempts", "webhook %q: max_attempts must not be negative", w.Name)
		}
		if w.BearerTokenFile != "" && w.BasicAuth != nil {
			ef("basic_auth", "webhook %q: set bearer_token_file or basic_auth, not both", w.Name)
		}
		if b := w.BasicAuth; b != nil {
			if b.Username == "" {
				errf(&b.meta, "username", "webhook %q: basic_auth needs a username", w.Name)
			}
			if b.PasswordFile == "" {
				errf(&b.meta, "password_file", "webhook %q: basic_auth needs a password_file", w.Name)
			}
		}
		if t := w.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
			errf(&t.meta, "cert_file", "webhook %q: tls: cert_file and key_file go together", w.Name)
		}
	}
	return errors.Join(errs...)
}

// Webhook returns the webhook named name.
func (c *Config) Webhook(name string) (*Webhook, bool) {
	for i := range c.Webhooks {
		if c.Webhooks[i].Name == name {
			return &c.Webhooks[i], true
		}
	}
	return nil, false
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("invalid url %s", RedactURL(s))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("url %s: scheme must be http or https", RedactURL(s))
	}
	if u.Host == "" {
		return fmt.Errorf("url %s has no host", RedactURL(s))
	}
	return nil
}

// RedactURL returns s with its user info and query values replaced by
// "xxxxx", so that a URL can appear in a log or an error. Unparseable input
// is replaced entirely.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "<unparseable url>"
	}
	if u.User != nil {
		u.User = url.User("xxxxx")
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{"xxxxx"}
		}
		u.RawQuery = q.Encode()
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}
