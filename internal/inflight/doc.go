// Package inflight samples spans while they run past their budget: where a
// slow span's time goes, and where a span that never ends is stuck.
//
// Spans are known in the kernel while they run. The span SDKs send a
// start event (emit.Start, the OpenTelemetry processor's OnStart, the C
// header's spanwatch_span_begin); bpf/inflight.h keeps a stack of open spans
// per thread of execution in inflight_exec: per goroutine for Go (the
// event's exec_id, its g pointer), per OS thread otherwise. USDT spans with
// a start probe are in usdt_inflight, or, paired by thread with a fixed name
// on 5.11+, in the task storage usdt_task_start.
//
// A Watcher scans them every Interval (inflight_exec with a BPF map
// iterator, or batch lookups where the kernel refuses the iterator;
// usdt_inflight from user space; the task storage with a task iterator)
// and, for each goroutine or thread with spans past their budgets, asks the
// programs of bpf/inflight.bpf.c to sample it: on the CPU through a perf
// event clock, off the CPU at sched_switch when it blocks (the kernel stack
// shows on what), and at each scan, from a sleepable task iterator, a
// thread that stays blocked (from its saved registers, 5.18+) or a
// goroutine the Go scheduler parked (from its saved context in the
// runtime's g). A goroutine is matched by the g pointer the runtime keeps in
// its thread's TLS (or, on arm64 without cgo, in register x28), so its
// samples follow it from thread to thread. Each
// sample is an overrun record in the core's ring buffer, one per overdue
// span, with StatusStillRunning (and StatusOffCPU) set and the time run so
// far as its duration. The samplers are attached only while something is
// watched.
//
// SetEarly (a budget's sample_from_start) has spans of the SDKs sampled
// on the CPU from their start: while it names any, the CPU clock stays
// attached and each tick samples the open spans of inflight_exec it names
// on a thread or goroutine not watched yet. The Joiner holds the samples
// taken within the budget until the span shows it runs over (a sample past
// the budget, or its end) and drops those of a span that does not
// (Joiner.EarlyDropped).
//
// A Joiner, in the collector's ring buffer reader, reports a span's first
// sample at once (an overrun with still_running set: a span that never ends
// is reported while it runs) and attaches the others to the span's overrun
// when it ends, as snapshot.Sample, each weighed by the span time it stands
// for.
//
//	w, err := inflight.New(inflight.Config{Logger: log,
//		Exec: maps.InflightExec, GProcs: maps.InflightGprocs, // the core's
//		Budgets: budgets, Overruns: overruns, Counters: counters})
//	defer w.Close()
//	w.AddUSDT(inflight.USDTMaps{Inflight: ..., Sources: ..., TaskStart: ...})
//	go w.Run(ctx)
//
// Spans paired by an argument (a request id) rather than a thread are not
// sampled: nothing says which thread is working on them.
//
// Needs kernel 5.8+ (ring buffer), 5.6+ for batch lookups or 5.9+ for the
// map iterator, 5.11+ for task storage, 5.18+ for the blocked sampler, and
// CAP_BPF with CAP_PERFMON, or root.
package inflight
