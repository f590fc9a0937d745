package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Headers set on every request. SignatureHeader and TimestampHeader only
// when the webhook has an hmac_secret_file.
const (
	IdempotencyKeyHeader = "X-Spanwatch-Idempotency-Key"
	TimestampHeader      = "X-Spanwatch-Timestamp"
	SignatureHeader      = "X-Spanwatch-Signature"
)

// DefaultSignatureTolerance is how far a signed request's timestamp may be
// from the receiver's clock before Verify rejects it as a replay.
const DefaultSignatureTolerance = 5 * time.Minute

// Sign returns the value of the X-Spanwatch-Signature header for body sent
// at timestamp ts (Unix seconds): "sha256=" and the hex HMAC-SHA256 of
// "<ts>.<body>" keyed with secret.
func Sign(secret []byte, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(strconv.AppendInt(nil, ts, 10))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Errors from Verify.
var (
	ErrNoSignature  = errors.New("request is not signed")
	ErrBadSignature = errors.New("signature does not match")
	ErrStale        = errors.New("timestamp outside tolerance (replayed or clock skew)")
)

// Verify checks a signed request's headers against body, as a receiver
// should: the signature must match, compared in constant time, and the
// timestamp must be within tolerance of now.
func Verify(secret []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	sig, tsText := h.Get(SignatureHeader), h.Get(TimestampHeader)
	if sig == "" || tsText == "" {
		return ErrNoSignature
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return fmt.Errorf("timestamp %q: %w", tsText, ErrBadSignature)
	}
	if !strings.HasPrefix(sig, "sha256=") || !hmac.Equal([]byte(sig), []byte(Sign(secret, ts, body))) {
		return ErrBadSignature
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return ErrStale
	}
	return nil
}
