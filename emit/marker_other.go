//go:build !amd64 && !arm64

package emit

// marker is a plain function where spanwatch has no assembly marker; the
// collector's marker source attaches only to amd64 and arm64 binaries.
//
//go:noinline
func marker(ev *event) {}
