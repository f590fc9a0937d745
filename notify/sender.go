package notify

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// maxBodyExcerpt bounds the part of a response body kept for errors.
const maxBodyExcerpt = 512

// Failure reasons, the "reason" label of the failure counter.
const (
	ReasonTimeout     = "timeout"     // the attempt exceeded the webhook's timeout
	ReasonConnection  = "connection"  // dial, TLS or connection reset
	ReasonHTTP5xx     = "http_5xx"    // retried
	ReasonHTTP429     = "http_429"    // retried after Retry-After
	ReasonHTTP4xx     = "http_4xx"    // permanent: another 4xx (or 3xx)
	ReasonCredentials = "credentials" // a secret file could not be read; retried
	ReasonRender      = "render"      // the body could not be built; permanent
	ReasonExpired     = "expired"     // given up after max_age or max_attempts
)

// A Response is what a receiver answered one attempt.
type Response struct {
	StatusCode int
	// Body is the start of the response body, at most 512 bytes.
	Body string
	// Retry reports whether a failed attempt is worth repeating.
	Retry bool
	// RetryAfter is the receiver's Retry-After, when it sent one.
	RetryAfter time.Duration
	// Reason classifies a failure; empty on success.
	Reason string
	// Err is nil when the receiver answered 2xx.
	Err error
}

// sender makes delivery attempts to one webhook.
type sender struct {
	w      *Webhook
	client *http.Client
}

func newSender(w *Webhook) (*sender, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 4
	if w.TLS != nil {
		tc, err := tlsConfig(w.TLS)
		if err != nil {
			return nil, fmt.Errorf("webhook %s: %w", w.Name, err)
		}
		tr.TLSClientConfig = tc
	}
	return &sender{w: w, client: &http.Client{
		Transport: tr,
		// Redirects are not followed: a POST body and its signature are
		// meant for the configured URL only.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}, nil
}

func tlsConfig(c *TLSConfig) (*tls.Config, error) {
	tc := &tls.Config{ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls ca_file %s: no PEM certificates found", c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		// Loaded at each handshake, so a renewed client certificate is
		// picked up without a restart.
		cert, key := c.CertFile, c.KeyFile
		if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
			return nil, fmt.Errorf("tls client certificate: %w", err)
		}
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			kp, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return nil, fmt.Errorf("tls client certificate: %w", err)
			}
			return &kp, nil
		}
	}
	return tc, nil
}

func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		// The path is not a secret, the content is; os errors hold only the path.
		return "", err
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

func (s *sender) url() (string, error) {
	if s.w.URLFile == "" {
		return s.w.URL, nil
	}
	u, err := readSecret(s.w.URLFile)
	if err != nil {
		return "", fmt.Errorf("url_file: %w", err)
	}
	u = strings.TrimSpace(u)
	if err := checkURL(u); err != nil {
		return "", fmt.Errorf("url_file %s: %w", s.w.URLFile, err)
	}
	return u, nil
}

// send makes one attempt to deliver body. It never returns secrets in
// Response.Err: URLs in errors are redacted.
func (s *sender) send(ctx context.Context, body []byte, idemKey string, now time.Time) Response {
	target, err := s.url()
	if err != nil {
		return Response{Retry: true, Reason: ReasonCredentials, Err: err}
	}
	redacted := RedactURL(target)
	ctx, cancel := context.WithTimeout(ctx, s.w.Timeout.D())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return Response{Reason: ReasonRender, Err: fmt.Errorf("post %s: build request: %w", redacted, redactErr(err))}
	}
	req.Header.Set("Content-Type", s.w.ContentType)
	req.Header.Set("User-Agent", "spanwatch")
	if idemKey != "" {
		req.Header.Set(IdempotencyKeyHeader, idemKey)
	}
	if err := s.authorize(req, body, now); err != nil {
		return Response{Retry: true, Reason: ReasonCredentials, Err: fmt.Errorf("post %s: %w", redacted, err)}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		reason := ReasonConnection
		if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			reason = ReasonTimeout
			err = fmt.Errorf("no answer within %s", s.w.Timeout)
		}
		return Response{Retry: true, Reason: reason, Err: fmt.Errorf("post %s: %w", redacted, redactErr(err))}
	}
	defer resp.Body.Close()
	// A receiver may echo the request, credentials and all: its answer is
	// redacted before anything keeps it (errors, logs, dead letters).
	// Enough is read past the excerpt that a secret it cuts is whole.
	red := s.w.redactor(target)
	excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, int64(maxBodyExcerpt+red.longest())))
	// Drain a little more so the connection can be reused.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	text := red.redact(string(excerpt))
	if len(text) > maxBodyExcerpt {
		text = text[:maxBodyExcerpt]
	}
	r := Response{StatusCode: resp.StatusCode, Body: strings.ToValidUTF8(text, "?")}
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		return r
	case code == http.StatusTooManyRequests:
		r.Reason, r.Retry = ReasonHTTP429, true
	case code >= 500 || code == http.StatusRequestTimeout:
		r.Reason, r.Retry = ReasonHTTP5xx, true
	default:
		r.Reason = ReasonHTTP4xx
	}
	r.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), now)
	r.Err = fmt.Errorf("post %s: %s: %q", redacted, resp.Status, r.Body)
	return r
}

func (s *sender) authorize(req *http.Request, body []byte, now time.Time) error {
	w := s.w
	switch {
	case w.BearerTokenFile != "":
		tok, err := readSecret(w.BearerTokenFile)
		if err != nil {
			return fmt.Errorf("bearer_token_file: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(tok))
	case w.BasicAuth != nil:
		pw, err := readSecret(w.BasicAuth.PasswordFile)
		if err != nil {
			return fmt.Errorf("basic_auth password_file: %w", err)
		}
		req.SetBasicAuth(w.BasicAuth.Username, pw)
	}
	if w.HMACSecretFile != "" {
		key, err := readSecret(w.HMACSecretFile)
		if err != nil {
			return fmt.Errorf("hmac_secret_file: %w", err)
		}
		ts := now.Unix()
		req.Header.Set(TimestampHeader, strconv.FormatInt(ts, 10))
		req.Header.Set(SignatureHeader, Sign([]byte(key), ts, body))
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// redactErr strips URLs out of err: a *url.Error carries the full URL,
// user info and query included.
func redactErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// parseRetryAfter reads a Retry-After header: delay seconds or an HTTP
// date. It returns 0 when absent or unparseable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
		if secs < 0 {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
