package emit

import (
	"os"
	"sync/atomic"
	"unsafe"
)

// userEventsWord is the user_events enable word inside probe (bytes 4-7).
func userEventsWord() *uint32 {
	return (*uint32)(unsafe.Add(unsafe.Pointer(&probe.word), 4))
}

// ueWriter writes the payload to the registered user_event; set by
// registerUserEvents when the kernel supports user_events.
var ueWriter interface {
	Write(payload ...[]byte) error
}

// ueErrors counts writes the kernel refused; see WriteErrors.
var ueErrors atomic.Uint64

// WriteErrors returns how many span writes the kernel refused (user_events
// mode only), so an application can report it.
func WriteErrors() uint64 { return ueErrors.Load() }

func writeUserEvent(ev *event) {
	if atomic.LoadUint32(userEventsWord())&1 == 0 {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(ev)), eventSize)
	if err := ueWriter.Write(b); err != nil {
		ueErrors.Add(1)
	}
}

func init() {
	switch os.Getenv("SPANWATCH_EMIT") {
	case "off":
		return
	case "marker":
		mode.Store(uint32(modeMarker))
		return
	}
	if w, err := registerUserEvents(); err == nil {
		ueWriter = w
		mode.Store(uint32(modeUserEvents))
		return
	} else if os.Getenv("SPANWATCH_EMIT") == "user_events" {
		initErr = err
	}
	mode.Store(uint32(modeMarker))
}

// initErr is why user_events could not be used when SPANWATCH_EMIT asked
// for it.
var initErr error

// ModeError returns why the user_events mode was not taken when
// SPANWATCH_EMIT=user_events asked for it, or nil.
func ModeError() error { return initErr }
