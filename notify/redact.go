package notify

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
)

// Redacted replaces a webhook's secret in a receiver's answer.
const Redacted = "<redacted>"

// minSecretLen is the shortest value searched for: shorter ones are no
// secret, and replacing them everywhere would garble the text.
const minSecretLen = 4

// A redactor removes one webhook's secrets from text a receiver sent back:
// a receiver that echoes its request (many do, in a 4xx body) would
// otherwise put the webhook's credentials into logs, the outbox's dead
// letters and GET /api/dead-letters.
type redactor struct {
	secrets []string // longest first, so a secret's part never goes first
}

// redactor reads the webhook's secrets as they are now (the files are read
// at each attempt, so a rotated secret is the one sent): the bearer
// token, the basic-auth password and its encoded user:password, the HMAC
// key, and of the URL the password of its user info, its query values
// and, for a URL read from url_file (which may embed a secret anywhere),
// its path. target is the URL the attempt went to ("" to read it). Each
// secret is also searched for in its URL, JSON and base64 forms.
func (w *Webhook) redactor(target string) *redactor {
	var raw []string
	file := func(path string) string {
		if path == "" {
			return ""
		}
		s, err := readSecret(path)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(s)
	}
	raw = append(raw, file(w.BearerTokenFile), file(w.HMACSecretFile))
	if w.BasicAuth != nil {
		pw := file(w.BasicAuth.PasswordFile)
		raw = append(raw, pw)
		if pw != "" {
			raw = append(raw, base64.StdEncoding.EncodeToString([]byte(w.BasicAuth.Username+":"+pw)))
		}
	}
	if target == "" {
		target = w.URL
		if w.URLFile != "" {
			target = file(w.URLFile)
		}
	}
	if u, err := url.Parse(target); err == nil {
		if pw, ok := u.User.Password(); ok {
			raw = append(raw, pw, base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw)))
		}
		for _, vs := range u.Query() {
			raw = append(raw, vs...)
		}
		for _, kv := range strings.Split(u.RawQuery, "&") {
			if _, v, ok := strings.Cut(kv, "="); ok {
				raw = append(raw, v) // as written, escapes and all
			}
		}
		if w.URLFile != "" && u.Path != "" && u.Path != "/" {
			raw = append(raw, u.Path, u.EscapedPath())
			for _, seg := range strings.Split(u.Path, "/") {
				raw = append(raw, seg)
			}
		}
	}
	var out []string
	for _, s := range raw {
		if len(s) < minSecretLen {
			continue
		}
		j, _ := json.Marshal(s)
		out = append(out, s, url.QueryEscape(s), url.PathEscape(s), string(j[1:len(j)-1]),
			base64.StdEncoding.EncodeToString([]byte(s)), base64.RawURLEncoding.EncodeToString([]byte(s)))
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return &redactor{secrets: slices.Compact(out)}
}

// redact returns s with every secret replaced by Redacted.
func (r *redactor) redact(s string) string {
	for _, sec := range r.secrets {
		if len(sec) >= minSecretLen && strings.Contains(s, sec) {
			s = strings.ReplaceAll(s, sec, Redacted)
		}
	}
	return s
}

// longest is the length of the longest secret: a text cut after n bytes
// is redacted whole when n+longest bytes of it were searched.
func (r *redactor) longest() int {
	if len(r.secrets) == 0 {
		return 0
	}
	return len(r.secrets[0])
}

// RedactDeadLetters removes from each dead letter's error and body the
// secrets of its webhook, as this configuration has them now. Letters
// stored before their receiver's answers were redacted at delivery, or
// whose webhook's secrets have changed since, are served clean too.
func (c *Config) RedactDeadLetters(list []DeadLetter) {
	byName := map[string]*redactor{}
	for i := range list {
		dl := &list[i]
		r, ok := byName[dl.Webhook]
		if !ok {
			if w, found := c.Webhook(dl.Webhook); found {
				r = w.redactor("")
			}
			byName[dl.Webhook] = r
		}
		if r == nil {
			continue
		}
		dl.Error = r.redact(dl.Error)
		if body := r.redact(string(dl.Body)); body != string(dl.Body) {
			if json.Valid([]byte(body)) {
				dl.Body = json.RawMessage(body)
			} else {
				dl.Body, _ = json.Marshal(body)
			}
		}
	}
}
