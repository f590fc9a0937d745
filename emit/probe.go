package emit

import (
	"sync/atomic"
	"unsafe"

	"github.com/spanwatch/spanwatch/internal/markerabi"
)

// probeMagic marks the probe word in the binary, so the collector can find
// it in binaries that have no symbol table.
const probeMagic = markerabi.Magic

// probeWord holds the enable word. It must not live on the Go heap (the
// kernel writes it, and the heap moves): a package variable with a non-zero
// initializer is placed in the binary's data segment, which never moves and
// is backed by the executable file, as a uprobe reference counter must be.
//
// The word sits one page into the variable because the Go runtime maps the
// first page of the data segment read-only (it holds the module data), and
// the kernel updates reference counters only in writable mappings.
//
// Bytes 0-1 of word are the marker's uprobe reference counter (the kernel
// adds one for each attached uprobe, like a USDT semaphore); bytes 4-7 are
// the user_events enable word (the kernel sets bit 0 while a perf event or
// BPF listener is on the event). Reading word as a whole tells whether
// anybody listens, in one load. magic follows word, so that the collector
// finds word in binaries without a symbol table.
type probeWord struct {
	_     [probeWordOffset]byte
	word  uint64
	magic [2]uint64
}

// probeWordOffset is word's offset in probe; the collector relies on it
// (markerabi.WordOffset: both sides import it).
const probeWordOffset = markerabi.WordOffset

var probe = probeWord{magic: [2]uint64{probeMagic, ^uint64(probeMagic)}}

// mode is how spans are sent; set once by init.
type sendMode uint32

const (
	modeOff sendMode = iota
	modeMarker
	modeUserEvents
)

var mode atomic.Uint32

// Mode returns how this process sends spans: "user_events", "marker" or
// "off".
func Mode() string {
	switch sendMode(mode.Load()) {
	case modeUserEvents:
		return "user_events"
	case modeMarker:
		return "marker"
	}
	return "off"
}

// markerActive reports whether a collector has uprobed the marker.
func markerActive() bool {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&probe.word)))&0xffff != 0
}

func send(ev *event) {
	switch sendMode(mode.Load()) {
	case modeMarker:
		if markerActive() {
			marker(ev)
		}
	case modeUserEvents:
		writeUserEvent(ev)
	}
}
