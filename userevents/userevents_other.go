//go:build !linux

package userevents

import "fmt"

// Event is a registered user_event. user_events exist only on Linux; on
// other systems Register always fails with ErrNotSupported.
type Event struct{}

// Register fails with ErrNotSupported: user_events exist only on Linux.
func Register(format string) (*Event, error) {
	return nil, fmt.Errorf("register user_event %q: %w", eventName(format), ErrNotSupported)
}

// Name returns the event's name.
func (e *Event) Name() string { return "" }

// Enabled reports false.
func (e *Event) Enabled() bool { return false }

// Write returns ErrNotSupported.
func (e *Event) Write(payload ...[]byte) error { return ErrNotSupported }

// WriteIndex returns 0.
func (e *Event) WriteIndex() uint32 { return 0 }

// Close does nothing.
func (e *Event) Close() error { return nil }

// Delete fails with ErrNotSupported.
func Delete(name string) error { return fmt.Errorf("delete user_event %s: %w", name, ErrNotSupported) }

// EventID fails with ErrNotSupported.
func EventID(name string) (uint32, error) {
	return 0, fmt.Errorf("user_event %s: %w", name, ErrNotSupported)
}

// TracefsDir fails with ErrNotSupported.
func TracefsDir() (string, error) { return "", fmt.Errorf("tracefs: %w", ErrNotSupported) }

// RegisterWord fails with ErrNotSupported: user_events exist only on Linux.
func RegisterWord(format string, word *uint32, bit uint8) (*Event, error) {
	return Register(format)
}

// KernelHas reports no user_events: they are a Linux facility.
func KernelHas() (has, known bool) { return false, true }
