package emit

import "unsafe"

// MarkerRaw calls the marker with an arbitrary pointer, so tests can hand
// the collector a payload it cannot read.
func MarkerRaw(p unsafe.Pointer) { marker((*event)(p)) }
