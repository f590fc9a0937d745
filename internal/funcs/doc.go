// Package funcs lists the functions of an ELF binary (x86-64 or arm64)
// and, for each, where a uprobe would see it enter and return: its entry's
// file offset and the file offset of every return instruction, found by
// disassembling the function (golang.org/x/arch on x86-64; on arm64 the
// A64 branch encodings, arm64.go). Putting uprobes on the
// return instructions instead of a uretprobe is what makes Go functions
// traceable: a uretprobe rewrites the return address on the stack, which
// the Go runtime's stack copying and unwinding do not survive. For a Go
// function that begins by checking its goroutine's stack, the
// entry is the instruction after the check (Func.Entry), since a call
// whose stack grows runs the check twice; a Go binary's version comes
// from its build information (File.GoVersion).
//
// Functions come from the ELF symbol tables (.symtab, else .dynsym), from
// a Go binary's function table (.gopclntab, which survives "go build
// -ldflags=-s -w"), and, for C and C++ binaries without .symtab (Debian
// strips it), from the frame descriptions in .eh_frame: a static function
// such as PostgreSQL's exec_simple_query has no name there, only its
// address range, and is listed unnamed.
//
// A function is refused, with the reason, when returns cannot all be seen:
// it has no return instruction, it jumps out of its own range (a tail
// call: the callee returns for it; on arm64 also a RET through another
// register than x30), it has more return sites than a cap, an
// instruction cannot be decoded (on arm64: a branch-group word this does
// not know), or its size is zero or past a cap.
//
// The binary is input a root agent must not trust: it is opened as
// internal/userfile opens users' files, parsed through internal/elfread's
// capped readers, and every table and function is read within a cap.
package funcs
