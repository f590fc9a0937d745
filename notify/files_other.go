//go:build !unix

package notify

import (
	"os"
	"time"
)

// writable is not checked where there is no access(2); opening the outbox
// reports the problem instead.
func writable(string, bool) error { return nil }

// lockFile is a no-op where there is no flock(2): bbolt's own lock at open
// is what keeps a second process out.
func lockFile(*os.File, bool, time.Duration) (bool, error) { return true, nil }

func unlockFile(*os.File) {}
