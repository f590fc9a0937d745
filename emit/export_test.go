package emit

import "unsafe"

// MarkerRaw calls the marker with an arbitrary pointer, so tests can hand
// the collector a payload it cannot read. Such a pointer is not Go
// memory: checkptr (on under -race) would throw at the conversion.
//
//go:nocheckptr
func MarkerRaw(p unsafe.Pointer) { marker((*event)(p)) }
