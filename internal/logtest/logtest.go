// Package logtest records what code under test logs, for tests that check
// a message is logged, and how often. Tests use it; the agent does not.
package logtest

import (
	"context"
	"log/slog"
	"sync"
)

// A Recorder is a slog.Handler that keeps the messages logged through it
// (every level); its zero value is ready.
type Recorder struct {
	mu   sync.Mutex
	msgs []string
}

// Logger returns a logger that records into r.
func (r *Recorder) Logger() *slog.Logger { return slog.New(r) }

func (r *Recorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *Recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}

func (r *Recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *Recorder) WithGroup(string) slog.Handler      { return r }

// Count returns how many times msg was logged.
func (r *Recorder) Count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if m == msg {
			n++
		}
	}
	return n
}
