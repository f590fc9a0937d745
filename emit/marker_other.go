//go:build !amd64

package emit

// marker is a plain function where spanwatch has no assembly marker; the
// collector's marker source is amd64-only.
//
//go:noinline
func marker(ev *event) {}
