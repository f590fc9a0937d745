package notify

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Buckets of the outbox file. alerts, nflog, queue and dead hold one nested
// bucket per webhook name.
var (
	bucketAlerts = []byte("alerts") // group key \x00 fingerprint -> storedAlert
	bucketNflog  = []byte("nflog")  // group key -> nflogEntry, the last notification
	bucketQueue  = []byte("queue")  // big-endian sequence -> queued, in delivery order
	bucketDead   = []byte("dead")   // big-endian sequence -> deadLetter, permanent failures
)

// maxDeadLetters bounds the permanently failed notifications kept per
// webhook for inspection; the oldest go first.
const maxDeadLetters = 256

// ErrOutboxInUse means another process holds the outbox file open.
var ErrOutboxInUse = errors.New("outbox file is in use by another process")

// openOutbox opens the outbox at path, creating it if needed. A file that
// bbolt cannot open or whose consistency check fails is renamed aside (the
// copy is kept, nothing is deleted) and a fresh outbox is created in its
// place; movedTo then names the copy and cause says what was wrong.
func openOutbox(path string) (db *bolt.DB, movedTo string, cause error, err error) {
	// The outbox holds alert contents: only spanwatch's user may read it.
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, "", nil, fmt.Errorf("create outbox directory: %w", err)
	}
	db, err = tryOpen(path)
	if err == nil {
		return db, "", nil, nil
	}
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, "", nil, fmt.Errorf("open outbox %s: %w", path, ErrOutboxInUse)
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", nil, fmt.Errorf("open outbox %s: %w (create the directory %s, or set routing.outbox.path)", path, err, filepath.Dir(path))
	}
	if errors.Is(err, os.ErrPermission) {
		return nil, "", nil, fmt.Errorf("open outbox %s: %w", path, err)
	}
	cause = err
	movedTo = fmt.Sprintf("%s.corrupt-%s", path, time.Now().UTC().Format("20060102T150405.000000000Z"))
	if rerr := os.Rename(path, movedTo); rerr != nil {
		return nil, "", cause, fmt.Errorf("move corrupt outbox %s aside: %w (it was: %v)", path, rerr, cause)
	}
	db, err = tryOpen(path)
	if err != nil {
		return nil, movedTo, cause, fmt.Errorf("create fresh outbox %s: %w", path, err)
	}
	return db, movedTo, cause, nil
}

// tryOpen opens and checks a bbolt file. bbolt panics, or faults on its
// memory map, on some kinds of damage; both come back as errors here.
func tryOpen(path string) (db *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if db != nil {
				db.Close()
			}
			db, err = nil, fmt.Errorf("outbox damaged: %v", r)
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) || errors.Is(err, os.ErrPermission) || errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("outbox damaged: %w", err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for cerr := range tx.Check() {
			return fmt.Errorf("outbox damaged: %w", cerr)
		}
		for _, b := range [][]byte{bucketAlerts, bucketNflog, bucketQueue, bucketDead} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return fmt.Errorf("outbox damaged: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// sub returns the nested bucket of webhook name under top, creating it.
func sub(tx *bolt.Tx, top []byte, name string) (*bolt.Bucket, error) {
	return tx.Bucket(top).CreateBucketIfNotExists([]byte(name))
}

// subRO returns the nested bucket of webhook name under top, or nil.
func subRO(tx *bolt.Tx, top []byte, name string) *bolt.Bucket {
	return tx.Bucket(top).Bucket([]byte(name))
}
