package emit

import (
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/spanwatch/spanwatch/internal/markerabi"
)

// TestProbeLayout checks what the collector looks for (source/marker):
// the enable word markerabi.WordOffset bytes into probe, then the magic
// and its complement, little-endian.
func TestProbeLayout(t *testing.T) {
	if off := unsafe.Offsetof(probe.word); off != markerabi.WordOffset {
		t.Fatalf("enable word at offset %d, want %d", off, markerabi.WordOffset)
	}
	after := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&probe.word), 8)), 16)
	if m := binary.LittleEndian.Uint64(after); m != markerabi.Magic {
		t.Fatalf("magic after the word: %#x, want %#x", m, uint64(markerabi.Magic))
	}
	if m := binary.LittleEndian.Uint64(after[8:]); m != ^uint64(markerabi.Magic) {
		t.Fatalf("second magic word: %#x, want %#x", m, ^uint64(markerabi.Magic))
	}
	if string(after[:8]) != "swprobe!" {
		t.Fatalf("magic bytes %q, want %q", after[:8], "swprobe!")
	}
}
