//go:build !unix

package notify

// writable is not checked where there is no access(2); opening the outbox
// reports the problem instead.
func writable(string, bool) error { return nil }
