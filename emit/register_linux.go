//go:build linux

package emit

import "github.com/spanwatch/spanwatch/userevents"

// ue is the registered span event. A concrete type, not an interface: the
// call through an interface made each write allocate.
var ue *userevents.Event

// registerUserEvents registers the span event with its enable bit in the
// probe word (bit 0 of bytes 4-7), so Enabled stays one load.
func registerUserEvents() error {
	e, err := userevents.RegisterWord(Format, userEventsWord(), 0)
	if err != nil {
		return err
	}
	ue = e
	return nil
}

func ueWrite(b []byte) error { return ue.Write(b) }
