package tracefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The tracefs systems that hold user_events: events registered the
// classic way, and those registered with USER_EVENT_REG_MULTI_FORMAT
// (kernel 6.9+), which the kernel names NAME.ID so that one name can have
// several formats at once.
const (
	SystemUserEvents      = "user_events"
	SystemUserEventsMulti = "user_events_multi"
)

// An Event names one trace event in tracefs.
type Event struct {
	System string // "user_events" or "user_events_multi"
	Name   string // the tracepoint's name: NAME, or NAME.ID in user_events_multi
}

// BaseName is the name the registering program gave: Name without the
// ".ID" the kernel appends in user_events_multi.
func (e Event) BaseName() string {
	if e.System != SystemUserEventsMulti {
		return e.Name
	}
	if i := strings.LastIndexByte(e.Name, '.'); i > 0 {
		return e.Name[:i]
	}
	return e.Name
}

func (e Event) String() string { return e.System + ":" + e.Name }

// UserEvents lists the user_events registered now, in both systems, from
// the tracefs mounted at dir. A system that does not exist (no event was
// ever registered in it, or a kernel without user_events) lists nothing.
func UserEvents(dir string) ([]Event, error) {
	var out []Event
	for _, sys := range []string{SystemUserEvents, SystemUserEventsMulti} {
		ents, err := os.ReadDir(filepath.Join(dir, "events", sys))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list %s events: %w", sys, err)
		}
		for _, e := range ents {
			if e.IsDir() {
				out = append(out, Event{System: sys, Name: e.Name()})
			}
		}
	}
	return out, nil
}

// ReadFormat reads and parses the format file of ev under the tracefs
// mounted at dir. An event that is not registered gives an error wrapping
// fs.ErrNotExist.
func ReadFormat(dir string, ev Event) (*Format, error) {
	path := filepath.Join(dir, "events", ev.System, ev.Name, "format")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read format of %s: %w", ev, err)
	}
	return ParseFormat(path, b)
}
