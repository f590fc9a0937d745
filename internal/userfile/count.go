package userfile

import (
	"maps"
	"sync"
)

// Reasons a user's file is refused, or read only in part. Open and Do count
// the first group themselves; the parsers count the second with Count.
const (
	ReasonSymlink    = "symlink"     // a symbolic or magic link where none may be
	ReasonNotRegular = "not_regular" // a FIFO, device, socket or directory
	ReasonOwner      = "owner"       // a perf map of neither the process's user nor root
	ReasonAccess     = "access"      // the process could not read it itself
	ReasonTooLarge   = "too_large"   // past Options.MaxSize
	ReasonTimeout    = "timeout"     // an open or read that did not finish in time
	ReasonBusy       = "busy"        // not tried: an operation for the same user is stuck

	ReasonSection      = "section_size"      // a section or segment read up to its cap
	ReasonDecompressed = "decompressed_size" // a compressed section inflated up to its cap
	ReasonHeaders      = "headers"           // ELF header tables past their caps: file not parsed
	ReasonSymbols      = "symbols"           // symbol table read up to its cap
	ReasonLines        = "line_rows"         // DWARF line rows kept up to their cap
	ReasonUnits        = "dwarf_units"       // DWARF units kept up to their cap
	ReasonGoFuncs      = "go_funcs"          // a Go pclntab with more functions than the cap: not used
	ReasonModuleMemory = "module_memory"     // one file's tables past their memory cap
	ReasonMemory       = "memory"            // all files' tables past the symbolizer's memory cap
	ReasonPerfMapSize  = "perf_map_size"     // a perf map read up to its cap
	ReasonPerfMapLines = "perf_map_entries"  // a perf map's entries kept up to their cap
	ReasonProcSize     = "proc_size"         // a /proc file read up to its cap
	ReasonBuildID      = "build_id"          // a debug file whose build id is not the binary's
)

var counts struct {
	sync.Mutex
	n map[string]uint64
}

// Count counts one refusal or cap by reason (one of the Reason constants).
func Count(reason string) {
	counts.Lock()
	if counts.n == nil {
		counts.n = map[string]uint64{}
	}
	counts.n[reason]++
	counts.Unlock()
}

// Counts returns the counts since the process started, by reason.
func Counts() map[string]uint64 {
	counts.Lock()
	defer counts.Unlock()
	return maps.Clone(counts.n)
}
