// Package usdt is the span source on USDT probes (the sources: usdt:
// section): it loads bpf/usdt.bpf.c beside the collector's core through
// internal/usdt's Tracer, attaches each declared source's probes, and
// lends the collector what it needs of them: placeholder names to
// resolve, probe sites the symbolizer keeps, maps the in-flight sampler
// watches, and the tracer's health counters for snapshots
// ("usdt/unpaired_end", "usdt/nest_overflow", ...).
//
// The probes themselves (ELF notes, argument specs, the tracer) are
// internal/usdt's; the section's decoding is usdt.DecodeSources there.
package usdt
