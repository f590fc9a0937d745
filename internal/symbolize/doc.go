// Package symbolize turns the raw stack addresses in an overrun record into
// frames: function, file, line, module, offset and build id.
//
// The collector keeps one Symbolizer and calls Capture as soon as a record
// for a process arrives, before the process may exit:
//
//	s := symbolize.New(symbolize.Config{Logger: log})
//	defer s.Close()
//	_ = s.Capture(rec.PID) // maps and mapped files, cached per exec
//	o.UserStack, err = s.User(rec.PID, rec.UserStack)
//	if err != nil {
//		o.StackError = err.Error()
//	} else {
//		o.StackError = symbolize.Hint(o.UserStack)
//	}
//	o.KernelStack, err = s.Kernel(rec.KernelStack) // /proc/kallsyms
//
// Capture reads /proc/PID/maps and opens every executable mapped file
// through /proc/PID/map_files (so files inside containers and deleted files
// resolve), falling back to /proc/PID/root. Files are shared between
// processes by device and inode and stay open while a process that mapped
// them is cached, so a process that has exited by the time its record is
// read still symbolizes. A process is captured again when it exec'd (its
// code and stack addresses in /proc/PID/stat change), and its maps are read
// again when an address misses (a library dlopen'd or code generated after
// the capture).
//
// Names come from, in order: a Go binary's pclntab (found by section, or by
// its header when the section headers are stripped, so "go build -ldflags=-s
// -w" binaries symbolize with file and line), with calls inlined by the
// compiler expanded into frames of their own (Go 1.21+, from the inline
// trees the runtime uses); the ELF .symtab and .dynsym, with DWARF line
// tables for file and line when present, or from a separate debug file
// found by GNU build id under /usr/lib/debug/.build-id or by
// .gnu_debuglink (in the process's root, then the host's) when the binary
// is stripped; the vDSO's own
// symbols, its image read from /proc/PID/mem; a JIT's perf map
// (/tmp/perf-PID.map, looked up in the process's own root and PID
// namespace, then on the host under its host PID), for anonymous and memfd
// code. An address nothing names keeps
// its module and offset, or just its address: frames are never dropped.
// ELF tables are parsed on a file's first lookup and cached, and so are
// lookups, so a cached frame costs a map lookup and a stack one allocation.
//
// Every file a user controls is opened through internal/userfile, as the
// process sees it and as perf(1) would accept it: binaries by
// /proc/PID/map_files or inside the process's root, with no link followed;
// a perf map only as a regular file, not a link, belonging to the
// process's user or root and readable by the process itself; debug files
// inside the process's root (links followed only inside it), carrying the
// binary's build id, or found by .gnu_debuglink and checked by its CRC.
// Nothing is opened or read under the Symbolizer's lock: a FIFO is refused
// without opening it, and every open and read of a process's files and
// /proc entries is bounded by Config.Timeout (a FUSE file whose daemon
// never answers, a process holding its mmap lock), so a file that cannot
// be read costs one timeout and never stops the agent. A file's tables are
// parsed on a goroutine of their own, within Limits: sections, symbol
// tables, decompressed sections, line rows and Go function tables are read
// up to caps, each file's tables and all of them together within memory
// caps, and a file past a cap is symbolized as far as the cap allows, the
// cap counted (userfile.Counts) and logged once. Files on local file
// systems are mapped, others are read.
//
// Kernel stacks symbolize from /proc/kallsyms. When kernel.kptr_restrict
// hides its addresses (the reader lacks CAP_SYSLOG), Kernel returns an error
// wrapping ErrKernelHidden that says so.
//
// Capabilities: reading other processes' maps, stat, mem (the vDSO) and
// root needs CAP_SYS_PTRACE; /proc/PID/map_files needs CAP_SYS_ADMIN or
// CAP_CHECKPOINT_RESTORE (5.9+), and without it files open through
// /proc/PID/root, where a binary deleted since it started is not found;
// kallsyms needs CAP_SYSLOG.
package symbolize
