// Package inflight captures the stacks of spans that are still running past
// their budget.
//
// A span that never ends (a request stuck on a lock, a query that hangs)
// never reaches the aggregation core, so the core captures no stack for it.
// USDT spans with a start probe are known in the kernel while they run: in
// the usdt_inflight map, or, for spans paired by thread with a fixed name on
// kernels with task storage (5.11+), in the task storage usdt_task_start. A
// Watcher scans the first from user space and the second with a BPF task
// iterator; for each span paired by thread that has run longer than its
// budget, it asks the BPF programs of bpf/inflight.bpf.c to sample that
// thread: on the CPU through a perf event clock, off the CPU at
// sched_switch (where the kernel stack shows what it waits on), and, when
// it stays blocked, from a sleepable task iterator that walks its user
// frame pointers from its saved registers (5.18+). Each sample is an
// ordinary overrun record in the core's ring buffer, with
// StatusStillRunning set in its status and the time run so far as its
// duration, so the collector decodes it like any other, as an overrun with
// still_running set (see DecodeStatus). The samplers are attached only
// while some thread is watched.
//
//	w, err := inflight.New(inflight.Config{Logger: log,
//		Inflight: tracer.Map("usdt_inflight"), Sources: tracer.Map("usdt_sources"),
//		TaskStart: tracer.Map("usdt_task_start"), // nil without task storage
//		Budgets: budgets, Overruns: overruns, Counters: counters})
//	defer w.Close()
//	go w.Run(ctx)
//
// Spans paired by an argument (a request id) rather than a thread are not
// sampled: nothing says which thread is working on them. Spans from the SDK
// (user_events or the marker) have no start event, so they cannot be seen
// while they run.
//
// Needs kernel 5.8+ (ring buffer) and CAP_BPF with CAP_PERFMON, or root.
package inflight
