//go:build amd64 || arm64

package emit

// marker is the function the collector uprobes (emit.marker.abi0). It is
// written in assembly (marker_amd64.s, marker_arm64.s) so that it is an
// ABI0 function whose argument sits on the stack at sp+8 on entry (on
// arm64, 0(RSP) is the caller's LR save slot), the same place on both
// architectures, and so that its first instruction, the uprobe's site, is
// a nop. What a hit costs depends on whether the kernel emulates that nop
// or single-steps it out of line:
//
//   - amd64: the one-byte nop (0x90) is emulated (arch/x86/kernel/uprobes.c,
//     branch_setup_xol_ops): about 0.5 µs a hit instead of 13 µs. A
//     five-byte nop follows it: where the kernel optimizes uprobes on
//     those (the uprobe syscall, Linux 6.18+) the collector attaches there,
//     and the kernel rewrites the nop into a call to its uprobe
//     trampoline, no trap (see marker_amd64.s for why that is safe here
//     and not in C, and BENCHMARKS.md for what it saves).
//   - arm64: the NOP (0xd503201f) is simulated from Linux 6.13
//     (simulate_nop, arch/arm64/kernel/probes/decode-insn.c); 6.12 and
//     older single-step it out of line, which the patch's benchmark puts
//     at about twice the cost of a hit (not measured by spanwatch).
//
//go:noescape
func marker(ev *event)
