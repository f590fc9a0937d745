package markerabi

const (
	// WordOffset is the enable word's offset in emit's probe variable:
	// one page in, because the Go runtime maps the first page of the data
	// segment read-only and the kernel updates uprobe reference counters
	// only in writable mappings.
	WordOffset = 4096
	// Magic follows the enable word, then its complement ^Magic: "swprobe!"
	// as little-endian bytes.
	Magic = 0x2165626f72707773
)

// libspanwatch's probe (struct spanwatch_probe_ in include/spanwatch.h):
// the enable word, CMagic and its complement, then the marker's address
// relative to the field that holds it, then how the marker takes its
// argument.
const (
	// CMagic follows the C probe's enable word: "swprobeC".
	CMagic = 0x4365626f72707773
	// CMarkerRelOffset is the offset, from the enable word, of the signed
	// 64-bit distance from that field to the marker function.
	CMarkerRelOffset = 24
	// CABIOffset is the offset, from the enable word, of the marker's
	// calling convention (a uint32).
	CABIOffset = 32
	// CABISysV: the event's address in the first argument register of
	// the System V ABI's C calling convention on the binary's machine:
	// %rdi on x86-64, x0 on AArch64. The collector attaches only to
	// binaries of its own machine, whose BPF program reads that register
	// (PT_REGS_PARM1).
	CABISysV = 1
	// CMarkerSymbol and CProbeSymbol are the C marker's and probe's
	// (hidden) symbols, in binaries that keep a symbol table.
	CMarkerSymbol = "spanwatch_marker_"
	CProbeSymbol  = "spanwatch_probe_"
)
