package emit

// getg returns the current goroutine's g pointer: the span's thread of
// execution, so that spanwatch follows a span's goroutine from thread to
// thread (the runtime keeps the pointer in thread-local storage, where BPF
// reads it while sampling).
func getg() uintptr
