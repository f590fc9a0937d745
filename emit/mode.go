package emit

import (
	"os"
	"sync"
	"sync/atomic"
	"unsafe"
)

// userEventsWord is the user_events enable word inside probe (bytes 4-7).
func userEventsWord() *uint32 {
	return (*uint32)(unsafe.Add(unsafe.Pointer(&probe.word), 4))
}

// ueErrors counts writes the kernel refused; see WriteErrors.
var ueErrors atomic.Uint64

// WriteErrors returns how many span writes the kernel refused (user_events
// mode only), so an application can report it.
func WriteErrors() uint64 { return ueErrors.Load() }

// payloads are buffers for the user_events write: the event itself stays on
// the caller's stack (the interface call would make it escape).
var payloads = sync.Pool{New: func() any { return new([eventSize]byte) }}

func writeUserEvent(ev *event) {
	if atomic.LoadUint32(userEventsWord())&1 == 0 {
		return
	}
	buf := payloads.Get().(*[eventSize]byte)
	*buf = *(*[eventSize]byte)(unsafe.Pointer(ev))
	if err := ueWrite(buf[:]); err != nil {
		ueErrors.Add(1)
	}
	payloads.Put(buf)
}

func init() {
	switch os.Getenv("SPANWATCH_EMIT") {
	case "off":
		return
	case "marker":
		mode.Store(uint32(modeMarker))
		return
	}
	if err := registerUserEvents(); err == nil {
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
