package userevents

import "errors"

// ErrNotSupported is wrapped by the errors of Register, Delete, EventID and
// TracefsDir when the kernel has no user_events: it is older than 6.4, or was
// built without CONFIG_USER_EVENTS (no user_events_data under a mounted
// tracefs), or has no tracefs at all, or the OS is not Linux.
var ErrNotSupported = errors.New("user_events not supported: needs Linux 6.4+ with CONFIG_USER_EVENTS=y")

// ErrClosed is returned by Write on an Event that was closed.
var ErrClosed = errors.New("user_event closed")
