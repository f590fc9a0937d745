// Package memory holds the agent to a memory budget: it finds the budget
// (a setting, else the memory limit of the agent's cgroup, else a default
// from the machine's memory), divides it between the parts of the agent
// that grow with the series (the kernel's maps, the series the collector,
// detector and exporter keep, the range history, queues and caches), sets
// Go's soft memory limit from it, and, while the agent runs, measures its
// memory and sheds detail in a fixed order when it nears the budget. It
// never sheds counts: what is shed is listed, with since when, on
// /metrics.
//
// The order (Level) is, from the first shed to the last:
//
//  1. stack detail: overrun records keep their innermost 32 user frames,
//     and lose their kernel stack and in-span samples; a snapshot keeps a
//     tenth of its overruns. (The symbolizer's tables and caches are
//     bounded by the plan, not cut at run time.) A stack costs more bytes
//     than anything else the agent keeps per event, and the loss is the
//     smallest: the span is still counted, over its budget, and alerted
//     on; the next overrun of the same code brings the same stack.
//  2. unused range history: each series keeps only the windows the ranges
//     of its own rules need, instead of the longest range of the rule
//     set. No rule's value changes; a series that a rule starts to select
//     later (a reload, a label that appears) starts with a shorter range.
//  3. stale exports: series that left the kernel (idle past the
//     collector's eviction) stop being exported at once instead of after
//     the series TTL. Their last values were served already; Prometheus
//     marks them stale.
//  4. range history depth: the range history keeps the newest windows that
//     fit; rules over longer ranges are computed over what is kept (the
//     range they cover is served on /metrics).
//
// Never shed: the counts, errors, sums and histograms of live series, in
// the kernel, in snapshots, in --output and on /metrics.
//
// The BPF maps are measured from /proc/self/fdinfo (ProcessMapBytes):
// each map's memlock where the kernel reports what the map uses (6.4+),
// else at least its size as MapShape computes it from its type, sizes and
// flags, the formula the plan's estimate uses too.
package memory
