//go:build linux

package sdkevent

import (
	"strings"
	"testing"

	"github.com/spanwatch/spanwatch/emit"
)

// TestFormatMatchesSDK: the event the agent registers is the one the SDK
// writes.
func TestFormatMatchesSDK(t *testing.T) {
	if Format != emit.Format {
		t.Fatalf("the agent registers %q, the SDK %q", Format, emit.Format)
	}
	if name, _, _ := strings.Cut(Format, " "); name != Name {
		t.Fatalf("Format names %q, Name is %q", name, Name)
	}
}
