package notify

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/spanwatch/spanwatch/internal/boltcheck"
)

// A DeadLetter is a notification given up on: refused by its receiver (a
// 4xx other than 429), expired (max_age or max_attempts), or one that could
// not be rendered. The outbox keeps the last 256 per webhook.
type DeadLetter struct {
	Webhook string `json:"webhook"`
	// ID is the notification's idempotency key, as sent in
	// X-Spanwatch-Idempotency-Key.
	ID      string    `json:"id"`
	Group   string    `json:"group"`
	Created time.Time `json:"created"`
	// Oldest is when the oldest alert in it was accepted.
	Oldest time.Time `json:"oldest"`
	Alerts int       `json:"alerts"`
	// Reason is the failure reason (http_4xx, expired, render, ...) and
	// Error what the last attempt said; At is when it was given up.
	Reason string    `json:"reason"`
	Error  string    `json:"error"`
	At     time.Time `json:"at"`
	// Body is the request body that was to be sent: the payload itself
	// when it is JSON, else a JSON string.
	Body json.RawMessage `json:"body"`
}

// DeadLetters returns the dead letters of every webhook in the outbox,
// including webhooks no longer configured, oldest first. It reads the
// running Dispatcher's outbox, whose file no other process can open while
// the agent holds it.
func (d *Dispatcher) DeadLetters() ([]DeadLetter, error) {
	var out []DeadLetter
	err := d.db.View(func(tx *bolt.Tx) error {
		var err error
		out, err = readDeadLetters(tx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read dead letters: %w", err)
	}
	d.mu.Lock()
	cfg := d.cfg
	d.mu.Unlock()
	cfg.RedactDeadLetters(out)
	return out, nil
}

func readDeadLetters(tx *bolt.Tx) ([]DeadLetter, error) {
	var out []DeadLetter
	top := tx.Bucket(bucketDead)
	if top == nil {
		return nil, nil
	}
	err := top.ForEachBucket(func(name []byte) error {
		return top.Bucket(name).ForEach(func(k, v []byte) error {
			out = append(out, decodeDeadLetter(string(name), k, v))
			return nil
		})
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out, err
}

// decodeDeadLetter decodes the dead letter stored under key k of webhook.
func decodeDeadLetter(webhook string, k, v []byte) DeadLetter {
	var dl deadLetter
	if err := json.Unmarshal(v, &dl); err != nil {
		return DeadLetter{Webhook: webhook, Reason: "unreadable", Error: fmt.Sprintf("dead letter %x: %v", k, err)}
	}
	body := json.RawMessage(dl.Body)
	if !json.Valid(body) {
		body, _ = json.Marshal(string(dl.Body))
	}
	return DeadLetter{
		Webhook: webhook, ID: dl.ID, Group: dl.Group, Created: dl.Created, Oldest: dl.Oldest,
		Alerts: dl.Alerts, Reason: dl.Reason, Error: dl.Error, At: dl.At, Body: body,
	}
}

// ErrOutboxDamaged is returned with the dead letters that could still be
// read from a damaged outbox file.
var ErrOutboxDamaged = errors.New("outbox damaged")

// ReadDeadLetters lists the dead letters of the outbox file at path while
// no agent runs on it (a running agent holds the file's lock: ask its
// listener instead, GET /api/dead-letters). It changes nothing. The file
// is verified before bbolt maps it (as the agent does at start); from a
// damaged file it returns the dead letters that can still be read, with an
// error wrapping ErrOutboxDamaged that says what is wrong.
func ReadDeadLetters(path string) ([]DeadLetter, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open outbox %s: %w", path, err)
	}
	defer f.Close()
	locked, err := lockFile(f, false, time.Second)
	if err != nil {
		return nil, fmt.Errorf("lock outbox %s: %w", path, err)
	}
	if !locked {
		return nil, fmt.Errorf("open outbox %s: %w: ask the agent's listener (GET /api/dead-letters)", path, ErrOutboxInUse)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("open outbox %s: %w", path, err)
	}
	if cerr := boltcheck.Check(f, fi.Size()); cerr != nil {
		var out []DeadLetter
		boltcheck.Salvage(f, fi.Size(), func(buckets [][]byte, k, v []byte) {
			if len(buckets) == 2 && bytes.Equal(buckets[0], bucketDead) {
				out = append(out, decodeDeadLetter(string(buckets[1]), k, v))
			}
		})
		sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
		return out, fmt.Errorf("%s: %w: %v (%d dead letters read from what is readable; the agent moves the file aside and salvages it at its next start)", path, ErrOutboxDamaged, cerr, len(out))
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("open outbox %s: %w: ask the agent's listener (GET /api/dead-letters)", path, ErrOutboxInUse)
		}
		return nil, fmt.Errorf("open outbox %s: %w", path, err)
	}
	defer db.Close()
	var out []DeadLetter
	err = db.View(func(tx *bolt.Tx) error {
		var err error
		out, err = readDeadLetters(tx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read dead letters: %w", err)
	}
	return out, nil
}
