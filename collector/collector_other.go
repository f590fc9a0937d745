//go:build !linux

package collector

// The collector needs Linux; on other systems only the package's
// documentation builds, so that `go vet ./...` works everywhere.
