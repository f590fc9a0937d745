package policy

import (
	"context"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"
)

// heapSample is how often a heap watch reads the heap. OPA's evaluator
// allocates up to about 1 GB/s on these machines: a policy outgrows its
// bound by a few MB before the watch sees it.
const heapSample = 2 * time.Millisecond

// heapObjects is the Go heap's objects, live or not yet swept.
const heapObjects = "/memory/classes/heap/objects:bytes"

// WatchHeap bounds the memory of the policy evaluations run under the
// returned context: when the Go heap grows past bound bytes over what it
// held when the watch began, the context is cancelled with cause
// ErrMemory, and evaluations under it stop at their next step
// (Policy.Eval then returns an error wrapping ErrMemory). The context
// also carries the bound to the builtins that allocate in one step
// (WithMemoryLimit). stop ends the watch and reports whether it cut the
// evaluations off.
//
// The heap's growth is not one policy's: policies that run at once share
// the watch, and other work of the agent allocates too. Growth alone is
// not a cut-off: past the bound the watch runs a collection and cuts off
// only when what is still live after it is past the bound, so garbage does
// not count; the collection is repeated at most once per bound bytes
// allocated. What the heap held at the start, garbage included, is the
// base, so a policy may keep up to the garbage of that moment more than
// the bound before it is cut off.
func WatchHeap(parent context.Context, bound int64) (ctx context.Context, stop func() (cut bool)) {
	ctx, cancel := context.WithCancelCause(WithMemoryLimit(parent, bound))
	s := []metrics.Sample{{Name: heapObjects}}
	read := func() int64 {
		metrics.Read(s)
		return int64(s[0].Value.Uint64())
	}
	base := read()
	done := make(chan struct{})
	var cutOff bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(heapSample)
		defer t.Stop()
		trigger := base + bound
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if read() <= trigger {
				continue
			}
			runtime.GC()
			live := read()
			if live > base+bound {
				cutOff = true
				cancel(ErrMemory)
				return
			}
			trigger = live + bound
		}
	}()
	return ctx, func() bool {
		close(done)
		wg.Wait()
		cancel(context.Canceled)
		return cutOff
	}
}
