//go:build !linux

package inflight

// The watcher needs Linux; on other systems only the package's
// documentation builds, so that `go vet ./...` works everywhere.
