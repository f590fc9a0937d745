package userfile

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrTimeout is returned by Do (and so by Open and the readers) when the
// operation did not finish before its context ended. The operation goes on
// in the background; what it returns then is discarded.
var ErrTimeout = errors.New("did not finish in time (a file system that does not answer, or a process holding its memory map lock)")

// ErrBusy is returned by Do, without trying, while an operation on behalf
// of the same user is stuck, or while MaxStuck operations are.
var ErrBusy = errors.New("not tried: an earlier read of this user's files is still stuck")

// DefaultTimeout bounds an operation whose context has no deadline.
const DefaultTimeout = 2 * time.Second

// MaxStuck bounds the operations left running after their caller gave up:
// each holds a goroutine and, blocked in a system call, a thread.
const MaxStuck = 64

var stuck struct {
	sync.Mutex
	total int
	by    map[string]int
}

// Stuck returns how many operations are running past their deadline now.
func Stuck() int {
	stuck.Lock()
	defer stuck.Unlock()
	return stuck.total
}

// Do runs fn on a goroutine of its own and returns what it returns, or
// ErrTimeout once ctx ends (DefaultTimeout when ctx has no deadline). A
// system call blocked on a FUSE daemon or behind another process's mmap
// lock cannot be interrupted, so fn is left running: when it returns,
// discard (if not nil) is given its result to release. fn must not touch
// state its caller keeps; it hands everything back through its result.
//
// on names whom the operation is for (a user, "uid 1000"): while an
// operation for the same name is stuck, Do fails at once with ErrBusy, so
// a user whose files hang stalls only the reading of their own files.
func Do[T any](ctx context.Context, on string, fn func() (T, error), discard func(T)) (T, error) {
	var zero T
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	stuck.Lock()
	busy := stuck.total >= MaxStuck || stuck.by[on] > 0
	stuck.Unlock()
	if busy {
		Count(ReasonBusy)
		return zero, ErrBusy
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
	}
	// fn may have finished just as ctx ended.
	select {
	case r := <-done:
		return r.v, r.err
	default:
	}
	Count(ReasonTimeout)
	stuck.Lock()
	stuck.total++
	if stuck.by == nil {
		stuck.by = map[string]int{}
	}
	stuck.by[on]++
	stuck.Unlock()
	go func() {
		r := <-done
		stuck.Lock()
		stuck.total--
		if stuck.by[on]--; stuck.by[on] <= 0 {
			delete(stuck.by, on)
		}
		stuck.Unlock()
		if discard != nil && r.err == nil {
			discard(r.v)
		}
	}()
	if errors.Is(ctx.Err(), context.Canceled) {
		return zero, ctx.Err()
	}
	return zero, fmt.Errorf("%w: %v", ErrTimeout, context.Cause(ctx))
}

// OnUID is the name Do's callers use for operations on behalf of user uid.
func OnUID(uid uint32) string { return fmt.Sprintf("uid %d", uid) }
