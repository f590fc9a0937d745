package notify

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/spanwatch/spanwatch/internal/boltcheck"
)

// Buckets of the outbox file. alerts, nflog, queue and dead hold one nested
// bucket per webhook name.
var (
	bucketAlerts = []byte("alerts") // group key \x00 fingerprint -> storedAlert
	bucketNflog  = []byte("nflog")  // group key -> nflogEntry, the last notification
	bucketQueue  = []byte("queue")  // big-endian sequence -> queued, in delivery order
	bucketDead   = []byte("dead")   // big-endian sequence -> deadLetter, permanent failures
	// bucketState holds what others keep in the outbox to survive a
	// restart (SaveState): name -> bytes.
	bucketState = []byte("state")
)

// maxDeadLetters bounds the permanently failed notifications kept per
// webhook for inspection; the oldest go first.
const maxDeadLetters = 256

// ErrOutboxInUse means another process holds the outbox file open.
var ErrOutboxInUse = errors.New("outbox file is in use by another process")

// recovery is what opening a damaged outbox did: where the file went, what
// was wrong with it, and what was read back from it into the fresh one.
type recovery struct {
	movedTo    string
	cause      error
	salvaged   int // records copied into the fresh outbox
	unreadable int // records found but not readable (bad JSON, bad keys)
	problems   []string
}

// openOutbox opens the outbox at path, creating it if needed.
//
// The file is verified before bbolt maps it (internal/boltcheck: every
// page read with bounds checks, so damage is an error, not a fault: bbolt
// reading a damaged file through its memory map, or its Tx.Check on a
// goroutine of its own, faults where no recover reaches and the process
// dies). A damaged file, or one bbolt refuses, is renamed aside (the copy
// is kept, nothing is deleted), a fresh outbox is created in its place, and
// every record that can still be read from the copy is carried over: the
// alerts, their groups' notification log, the queued notifications (in
// order, their sequence kept) and the dead letters. rec says what happened;
// nil for a sound file.
func openOutbox(path string) (db *bolt.DB, rec *recovery, err error) {
	// The outbox holds alert contents: only spanwatch's user may read it.
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, nil, fmt.Errorf("create outbox directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		db, err := tryOpen(path)
		if err != nil {
			return nil, nil, openError(path, err)
		}
		return db, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("open outbox %s: %w", path, err)
	}
	defer f.Close()
	// Held while the file is judged and, if damaged, moved aside, so that
	// no other agent writes it meanwhile.
	locked, err := lockFile(f, true, time.Second)
	if err != nil {
		return nil, nil, fmt.Errorf("lock outbox %s: %w", path, err)
	}
	if !locked {
		return nil, nil, fmt.Errorf("open outbox %s: %w", path, ErrOutboxInUse)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("open outbox %s: %w", path, err)
	}
	cause := boltcheck.Check(f, fi.Size())
	if cause == nil {
		unlockFile(f) // bbolt takes its own lock, on its own descriptor
		db, err = tryOpen(path)
		if err == nil {
			return db, nil, nil
		}
		if errors.Is(err, berrors.ErrTimeout) || errors.Is(err, os.ErrPermission) || errors.Is(err, os.ErrNotExist) {
			return nil, nil, openError(path, err)
		}
		if locked, lerr := lockFile(f, true, time.Second); lerr != nil || !locked {
			return nil, nil, fmt.Errorf("open outbox %s: %w", path, ErrOutboxInUse)
		}
		cause = err
	} else {
		cause = fmt.Errorf("outbox damaged: %w", cause)
	}
	rec = &recovery{cause: cause, movedTo: fmt.Sprintf("%s.corrupt-%s", path, time.Now().UTC().Format("20060102T150405.000000000Z"))}
	if err := os.Rename(path, rec.movedTo); err != nil {
		return nil, nil, fmt.Errorf("move damaged outbox %s aside: %w (it was: %v)", path, err, cause)
	}
	db, err = tryOpen(path)
	if err != nil {
		return nil, rec, fmt.Errorf("create fresh outbox %s: %w", path, err)
	}
	if err := rec.salvage(f, fi.Size(), db); err != nil {
		// What could not be carried over stays in the copy.
		rec.problems = append(rec.problems, err.Error())
	}
	return db, rec, nil
}

func openError(path string, err error) error {
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("open outbox %s: %w", path, ErrOutboxInUse)
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("open outbox %s: %w (create the directory %s, or set routing.outbox.path)", path, err, filepath.Dir(path))
	}
	return fmt.Errorf("open outbox %s: %w", path, err)
}

// salvage copies the records that can still be read from the damaged
// outbox f into the fresh db, each checked the way the dispatcher will
// read it; the rest are counted as unreadable.
func (rec *recovery) salvage(f *os.File, size int64, db *bolt.DB) error {
	type record struct {
		top, sub string
		k, v     []byte
	}
	var recs []record
	rep := boltcheck.Salvage(f, size, func(buckets [][]byte, k, v []byte) {
		if len(buckets) == 1 && bytes.Equal(buckets[0], bucketState) {
			recs = append(recs, record{top: string(bucketState), k: k, v: v})
			return
		}
		if len(buckets) != 2 || !readable(buckets[0], k, v) {
			rec.unreadable++
			return
		}
		recs = append(recs, record{top: string(buckets[0]), sub: string(buckets[1]), k: k, v: v})
	})
	rec.problems = append(rec.problems, rep.Problems...)
	return db.Update(func(tx *bolt.Tx) error {
		seqs := map[*bolt.Bucket]uint64{}
		for _, r := range recs {
			b := tx.Bucket([]byte(r.top))
			if r.sub != "" {
				var err error
				if b, err = b.CreateBucketIfNotExists([]byte(r.sub)); err != nil {
					return err
				}
			}
			if err := b.Put(r.k, r.v); err != nil {
				return err
			}
			if len(r.k) == 8 && (r.top == string(bucketQueue) || r.top == string(bucketDead)) {
				seqs[b] = max(seqs[b], binary.BigEndian.Uint64(r.k))
			}
			rec.salvaged++
		}
		// New notifications and dead letters are numbered after the
		// salvaged ones, so the queue keeps its order.
		for b, seq := range seqs {
			if err := b.SetSequence(seq); err != nil {
				return err
			}
		}
		return nil
	})
}

// readable reports whether a record of top bucket top decodes the way
// the dispatcher reads it.
func readable(top, k, v []byte) bool {
	switch {
	case bytes.Equal(top, bucketAlerts):
		var sa storedAlert
		return json.Unmarshal(v, &sa) == nil && sa.Alert != nil && bytes.IndexByte(k, 0) > 0
	case bytes.Equal(top, bucketNflog):
		var e nflogEntry
		return json.Unmarshal(v, &e) == nil
	case bytes.Equal(top, bucketQueue):
		var q queued
		return len(k) == 8 && json.Unmarshal(v, &q) == nil && q.ID != ""
	case bytes.Equal(top, bucketDead):
		var dl deadLetter
		return len(k) == 8 && json.Unmarshal(v, &dl) == nil
	}
	return false
}

// tryOpen opens a bbolt file that boltcheck accepted (or a new one) and
// makes the top buckets. bbolt panics on some kinds of damage boltcheck
// does not look for (a page whose id disagrees with its place); those
// come back as errors here, and faults too, on this goroutine.
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
		for _, b := range [][]byte{bucketAlerts, bucketNflog, bucketQueue, bucketDead, bucketState} {
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

// SaveState keeps data under name in the outbox, durably (one
// transaction, synced), for the next run on the same outbox: what the
// agent needs after a restart besides the alerts in delivery (the
// detector's alert state). It is salvaged with the rest from a damaged
// outbox, and does not count against max_entries.
func (d *Dispatcher) SaveState(name string, data []byte) error {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return ErrClosed
	}
	err := d.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketState).Put([]byte(name), data)
	})
	if err != nil {
		d.writeErrors.Add(1)
		return fmt.Errorf("save %s state to the outbox: %w", name, err)
	}
	return nil
}

// LoadState returns what SaveState kept under name, nil when nothing.
func (d *Dispatcher) LoadState(name string) ([]byte, error) {
	var out []byte
	err := d.db.View(func(tx *bolt.Tx) error {
		out = bytes.Clone(tx.Bucket(bucketState).Get([]byte(name)))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load %s state from the outbox: %w", name, err)
	}
	return out, nil
}
