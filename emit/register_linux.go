//go:build linux

package emit

import "github.com/spanwatch/spanwatch/userevents"

// registerUserEvents registers the span event with its enable bit in the
// probe word (bit 0 of bytes 4-7), so Enabled stays one load.
func registerUserEvents() (interface{ Write(...[]byte) error }, error) {
	return userevents.RegisterWord(Format, userEventsWord(), 0)
}
