//go:build linux

package userevents

import (
	"runtime"
	"sync"
)

// The kernel keeps a process's user_events enablers (address and bit of each
// registration) in a structure hung off the registering *thread*
// (task_struct.user_event_mm), shared only with threads that thread creates
// afterwards, and destroyed when those threads have all exited. Go runs a
// goroutine on any of its threads, most of them created before the first
// registration, and ends threads that exit locked. So one thread that never
// exits does every DIAG_IOCSREG and DIAG_IOCSUNREG: registrations from
// different threads would otherwise land in different lists, an unregister
// from another thread fails with ENOENT, and enable bits stop being updated
// when the registering thread exits.
var ioctlThread struct {
	once sync.Once
	reqs chan func()
}

// onIoctlThread runs fn on the dedicated thread and waits for it.
func onIoctlThread(fn func()) {
	ioctlThread.once.Do(func() {
		ioctlThread.reqs = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: this thread is the enablers' owner
			for f := range ioctlThread.reqs {
				f()
			}
		}()
	})
	done := make(chan struct{})
	ioctlThread.reqs <- func() { fn(); close(done) }
	<-done
}
