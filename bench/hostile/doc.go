// Package hostilebench plays issue 21's hostile local user against a
// running spanwatch agent, case by case, and prints what the agent did:
//
//	sudo go test -run '^$' -bench . -benchtime 1x ./bench/hostile/
//	sudo SPANWATCH_BIN=/path/to/old/spanwatch go test -run '^$' -bench . -benchtime 1x ./bench/hostile/
//
// It builds the agent from this tree (or takes SPANWATCH_BIN, to measure
// another build the same way) and, for each case, starts it with a fresh
// configuration: a USDT source on the victim's emitter (testdata/emitter.c,
// a 5 ms span past a 1 ms budget, called through a trampoline in anonymous
// executable memory as a JIT's code is, so that only a perf map names that
// frame) and on a control emitter, --output, the listener, and a webhook
// to a local receiver. The user, nobody, plants what the case says in the
// victim's own /tmp (a mount namespace of its own, or user, mount and PID
// namespaces): links to a root-only secret, a FIFO, a 204 MB perf map, a
// binary with a 256 MiB symbol table, a zlib bomb as .debug_info. Then a
// control emitter and a Go program using the span SDK start, and the run
// reports, per case:
//
//   - leaked: lines of the root-only secret (or of nobody's planted map)
//     seen as frames in --output, /snapshot and the webhook bodies;
//   - the agent's RSS before the attack and its peak during it;
//   - the control emitter's overruns delivered after the attack, and
//     whether the Go program, started after it, was attached (its spans
//     counted);
//   - how long SIGTERM took to end the agent (killed after 30 s).
//
// Needs root, cc with sys/sdt.h (systemtap-sdt-dev), setpriv, unshare and
// mount, on amd64; skips with the reason otherwise. Figures are in
// BENCHMARKS.md.
package hostilebench
