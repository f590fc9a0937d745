//go:build amd64 || arm64

package emit

// getg returns the current goroutine's g pointer: the span's thread of
// execution, so that spanwatch follows a span's goroutine from thread to
// thread (goroutine_amd64.s, goroutine_arm64.s).
func getg() uintptr
