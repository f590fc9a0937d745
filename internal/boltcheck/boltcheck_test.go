package boltcheck

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// makeDB writes a bbolt file shaped like spanwatch's outbox: top buckets
// with nested buckets per webhook, n records of a few hundred bytes each
// (large enough for branch pages), a few deleted (freed pages), and a
// small nested bucket (inline). It returns the path and the records.
func makeDB(t testing.TB, n int) (string, map[string]string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outbox.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	want := map[string]string{}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, top := range []string{"alerts", "queue"} {
			tb, err := tx.CreateBucketIfNotExists([]byte(top))
			if err != nil {
				return err
			}
			for _, hook := range []string{"ops", "pager"} {
				b, err := tb.CreateBucketIfNotExists([]byte(hook))
				if err != nil {
					return err
				}
				for i := 0; i < n; i++ {
					k := fmt.Sprintf("group-%05d\x00fp%d", i, i)
					v := fmt.Sprintf(`{"alert":{"labels":{"alertname":"A%d"},"state":"firing"},"pad":%q}`, i, bytes.Repeat([]byte("x"), 200+i%300))
					if err := b.Put([]byte(k), []byte(v)); err != nil {
						return err
					}
					want[top+"/"+hook+"/"+k] = v
				}
			}
		}
		small, err := tx.CreateBucketIfNotExists([]byte("small"))
		if err != nil {
			return err
		}
		want["small/k"] = "v"
		return small.Put([]byte("k"), []byte("v"))
	})
	if err != nil {
		t.Fatal(err)
	}
	// Deletes in a second transaction leave freed pages.
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("queue")).Bucket([]byte("pager"))
		for i := 0; i < n/3; i++ {
			k := fmt.Sprintf("group-%05d\x00fp%d", i, i)
			if err := b.Delete([]byte(k)); err != nil {
				return err
			}
			delete(want, "queue/pager/"+k)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return path, want
}

func checkFile(t testing.TB, path string) error {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	return Check(f, fi.Size())
}

func salvageFile(t testing.TB, path string) (map[string]string, Report) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	got := map[string]string{}
	rep := Salvage(f, fi.Size(), func(bs [][]byte, k, v []byte) {
		p := ""
		for _, b := range bs {
			p += string(b) + "/"
		}
		got[p+string(k)] = string(v)
	})
	return got, rep
}

// readAll opens an accepted file with bbolt and reads every record and
// runs its own Check: what must not fault on a file Check accepts.
func readAll(t testing.TB, path string) (n int, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("bbolt panicked on an accepted file: %v", r)
		}
	}()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		for cerr := range tx.Check() {
			return cerr
		}
		var walk func(b *bolt.Bucket) error
		walk = func(b *bolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				if v == nil {
					return walk(b.Bucket(k))
				}
				n++
				return nil
			})
		}
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error { return walk(b) })
	})
	return n, err
}

func TestSoundFile(t *testing.T) {
	path, want := makeDB(t, 3000)
	if err := checkFile(t, path); err != nil {
		t.Fatalf("a sound file: %v", err)
	}
	got, rep := salvageFile(t, path)
	if len(rep.Problems) != 0 || len(got) != len(want) {
		t.Fatalf("salvage of a sound file: %d records of %d, problems %v", len(got), len(want), rep.Problems)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("record %q: got %d bytes, want %d", k, len(got[k]), len(v))
		}
	}
	if err := Check(bytes.NewReader(nil), 0); err != nil {
		t.Errorf("an empty file (bbolt initializes it): %v", err)
	}
}

// pages calls fn with each page's offset and flags.
func pages(data []byte, ps int, fn func(off int, flags uint16)) {
	for off := 2 * ps; off+pageHeaderSize <= len(data); off += ps {
		fn(off, binary.LittleEndian.Uint16(data[off+8:]))
	}
}

// TestDamage damages a 3000-record outbox the ways that crashed the agent
// or that a disk does, and checks that Check refuses each, that Salvage
// reads what is left without a fault, and how much it recovers.
func TestDamage(t *testing.T) {
	ps := os.Getpagesize()
	tests := []struct {
		name    string
		damage  func(data []byte) []byte
		minKept float64 // share of the records Salvage must recover
	}{
		{"leaf counts 0xffff", func(d []byte) []byte {
			// The case: every leaf page's count field set to 0xffff.
			pages(d, ps, func(off int, flags uint16) {
				if flags == flagLeaf {
					binary.LittleEndian.PutUint16(d[off+10:], 0xffff)
				}
			})
			return d
		}, 0},
		{"one leaf count 0xffff", func(d []byte) []byte {
			done := false
			pages(d, ps, func(off int, flags uint16) {
				if flags == flagLeaf && !done {
					binary.LittleEndian.PutUint16(d[off+10:], 0xffff)
					done = true
				}
			})
			return d
		}, 0.9},
		{"branch child out of range", func(d []byte) []byte {
			done := false
			pages(d, ps, func(off int, flags uint16) {
				if flags == flagBranch && !done {
					binary.LittleEndian.PutUint64(d[off+pageHeaderSize+8:], 1<<40)
					done = true
				}
			})
			return d
		}, 0.9},
		{"branch child pointing at itself", func(d []byte) []byte {
			done := false
			pages(d, ps, func(off int, flags uint16) {
				if flags == flagBranch && !done {
					binary.LittleEndian.PutUint64(d[off+pageHeaderSize+8:], uint64(off/ps))
					done = true
				}
			})
			return d
		}, 0.9},
		{"element position past the page", func(d []byte) []byte {
			done := false
			pages(d, ps, func(off int, flags uint16) {
				if flags == flagLeaf && !done {
					binary.LittleEndian.PutUint32(d[off+pageHeaderSize+4:], 1<<30)
					done = true
				}
			})
			return d
		}, 0.9},
		{"freelist count 0xffff", func(d []byte) []byte {
			pages(d, ps, func(off int, flags uint16) {
				if flags == flagFreelist {
					binary.LittleEndian.PutUint16(d[off+10:], 0xffff)
					binary.LittleEndian.PutUint64(d[off+pageHeaderSize:], 1<<50)
				}
			})
			return d
		}, 0.99},
		{"truncated to half", func(d []byte) []byte { return d[:len(d)/2] }, 0},
		{"meta pages zeroed", func(d []byte) []byte { clear(d[:2*ps]); return d }, 0},
		{"page types flipped", func(d []byte) []byte {
			// Every tenth tree page's flags (values are not checksummed:
			// a flipped byte in a value is the reader's to find).
			n := 0
			pages(d, ps, func(off int, flags uint16) {
				if (flags == flagLeaf || flags == flagBranch) && n%10 == 0 {
					d[off+8] ^= 0xff
				}
				n++
			})
			return d
		}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path, want := makeDB(t, 3000)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			data = tc.damage(data)
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			err = checkFile(t, path)
			if !errors.Is(err, ErrDamaged) {
				t.Fatalf("Check accepted the damaged file (%v)", err)
			}
			got, rep := salvageFile(t, path)
			ok := 0
			for k, v := range got {
				if want[k] == v {
					ok++
				}
			}
			t.Logf("%s; salvaged %d of %d records (%d intact)", err, len(got), len(want), ok)
			if float64(ok) < tc.minKept*float64(len(want)) {
				t.Errorf("salvaged %d intact records of %d, want at least %.0f%%", ok, len(want), 100*tc.minKept)
			}
			if len(rep.Problems) == 0 {
				t.Error("Salvage reported no problem")
			}
		})
	}
}

// TestRandomDamage damages files at random (bytes of pages overwritten
// with random values, counts and offsets included) many times: Check and
// Salvage never fault or hang, and every file Check accepts, bbolt opens,
// checks and reads to the end without a fault.
func TestRandomDamage(t *testing.T) {
	path, _ := makeDB(t, 400)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ps := os.Getpagesize()
	rng := rand.New(rand.NewSource(7))
	rounds, accepted := 300, 0
	if testing.Short() {
		rounds = 100
	}
	for i := 0; i < rounds; i++ {
		data := bytes.Clone(orig)
		for j := 0; j < 1+rng.Intn(4); j++ {
			page := 2 + rng.Intn(len(data)/ps-2)
			off := page*ps + rng.Intn(64) // headers and first elements: where damage bites
			if rng.Intn(3) == 0 {
				off = page*ps + rng.Intn(ps)
			}
			data[off] = byte(rng.Intn(256))
		}
		p := filepath.Join(t.TempDir(), "d.db")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		err := checkFile(t, p)
		salvageFile(t, p)
		if err != nil {
			continue
		}
		accepted++
		if _, err := readAll(t, p); err != nil {
			t.Fatalf("round %d: Check accepted a file bbolt fails on: %v", i, err)
		}
	}
	t.Logf("%d damaged files, %d accepted (damage to bytes bbolt does not read) and read by bbolt without a fault", rounds, accepted)
}

// BenchmarkCheck measures Check on a 10000-alert outbox (what the agent
// verifies at every start) beside bbolt's own Tx.Check of the same file.
func BenchmarkCheck(b *testing.B) {
	path, _ := makeDB(b, 5000) // 2 webhooks x 5000 alerts, and queues
	fi, _ := os.Stat(path)
	b.Run("boltcheck", func(b *testing.B) {
		f, _ := os.Open(path)
		defer f.Close()
		b.SetBytes(fi.Size())
		for range b.N {
			if err := Check(f, fi.Size()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bbolt-open-and-Tx.Check", func(b *testing.B) {
		b.SetBytes(fi.Size())
		for range b.N {
			db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
			if err != nil {
				b.Fatal(err)
			}
			db.View(func(tx *bolt.Tx) error {
				for err := range tx.Check() {
					b.Fatal(err)
				}
				return nil
			})
			db.Close()
		}
	})
}
