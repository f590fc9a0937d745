package memory

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// fdinfo writes a proc directory whose fdinfo holds the maps given (and a
// file that is not a map), as Linux prints them.
func fdinfo(t *testing.T, maps []MapShape, memlock []uint64) string {
	t.Helper()
	dir := t.TempDir()
	fd := filepath.Join(dir, "self", "fdinfo")
	if err := os.MkdirAll(fd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fd, "0"), []byte("pos:\t0\nflags:\t02\nmnt_id:\t25\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, m := range maps {
		s := fmt.Sprintf("pos:\t0\nflags:\t02000002\nmnt_id:\t16\nino:\t1057\nmap_type:\t%d\nkey_size:\t%d\nvalue_size:\t%d\nmax_entries:\t%d\nmap_flags:\t%#x\nmap_extra:\t0x0\nmemlock:\t%d\nmap_id:\t%d\nfrozen:\t0\n",
			m.Type, m.KeySize, m.ValueSize, m.MaxEntries, m.Flags, memlock[i], 100+i)
		if err := os.WriteFile(filepath.Join(fd, fmt.Sprint(i+3)), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "self")
}

// TestProcessMapBytes holds the meter to what the kernel charges: fdinfo's
// memlock where it is that (6.4+, and before 5.11), the map's shape's
// most from 5.11 to 6.3, where memlock is the keys' and values' sizes
// (Debian's 6.1 printed 1.84 MB for the compat core's maps of 11.2 MB),
// and the larger of the two for a release it cannot read.
func TestProcessMapBytes(t *testing.T) {
	prealloc := MapShape{Type: mapHash, KeySize: 72, ValueSize: 4, MaxEntries: 20000}
	grows := MapShape{Type: mapHash, KeySize: 8, ValueSize: 8, MaxEntries: 16384, Flags: FlagNoPrealloc}
	ring := MapShape{Type: mapRingBuf, MaxEntries: 1 << 22}
	mmap := MapShape{Type: mapArray, KeySize: 4, ValueSize: 64, MaxEntries: 1 << 16, Flags: FlagMmapable}
	shapes := []MapShape{prealloc, grows, ring, mmap}
	most := func(s MapShape) uint64 { m, _ := s.Bytes(2); return m }
	idle := func(s MapShape) uint64 { _, i := s.Bytes(2); return i }
	// bpf_map_memory_footprint (5.11 to 6.3): keys and values, a page
	// at least; nothing for a ring buffer.
	footprint := []uint64{20000 * 80, 16384 * 16, 0, 1 << 16 * 72}
	for _, tc := range []struct {
		release string
		memlock []uint64
		want    uint64
	}{
		// 6.4+: memlock is map_mem_usage: the empty growing hash at its
		// bucket array.
		{"6.12.57+deb13-amd64", []uint64{most(prealloc), idle(grows), most(ring), most(mmap)},
			most(prealloc) + idle(grows) + most(ring) + most(mmap)},
		// 5.10: the pages charged at creation.
		{"5.10.0-43-cloud-amd64", []uint64{most(prealloc) + 100, most(grows), most(ring), most(mmap)},
			most(prealloc) + 100 + most(grows) + most(ring) + most(mmap)},
		// 6.1: the estimate, the growing hash counted full, the array
		// without its keys.
		{"6.1.0-37-cloud-amd64", footprint,
			most(prealloc) + most(grows) + most(ring) + most(mmap)},
		// An unreadable release: the larger figure of each.
		{"not a release", footprint,
			most(prealloc) + most(grows) + most(ring) + max(most(mmap), footprint[3])},
	} {
		p := &ProcessMapBytes{proc: fdinfo(t, shapes, tc.memlock), release: tc.release}
		got := p.Read()
		if got != tc.want {
			t.Errorf("kernel %q: %d bytes, want %d", tc.release, got, tc.want)
		}
		t.Logf("kernel %q: %d bytes", tc.release, got)
	}
}

// TestMapShapeBytes: a map that grows with use is its bucket array idle
// and its elements, with their headers and free-list nodes, full; any
// other map is the same figure both ways.
func TestMapShapeBytes(t *testing.T) {
	page := uint64(os.Getpagesize())
	for _, tc := range []struct {
		s          MapShape
		most, idle uint64
	}{
		// 16384 buckets of 16 bytes and struct bpf_htab; elements of a
		// 48-byte header, 8-byte key and value, 8-byte llist node.
		{MapShape{Type: mapHash, KeySize: 8, ValueSize: 8, MaxEntries: 16384, Flags: FlagNoPrealloc}, 1000 + 16384*16 + 16384*72, 1000 + 16384*16},
		// Preallocated: every element and one spare per CPU (2 here).
		{MapShape{Type: mapHash, KeySize: 8, ValueSize: 8, MaxEntries: 16384}, 1000 + 16384*16 + 16386*64, 1000 + 16384*16 + 16386*64},
		// LRU hashes are always preallocated, whatever the flags.
		{MapShape{Type: mapLRUHash, KeySize: 8, ValueSize: 8, MaxEntries: 1024, Flags: FlagNoPrealloc}, 1000 + 1024*16 + 1024*64, 1000 + 1024*16 + 1024*64},
		// Whole pages, and one more.
		{MapShape{Type: mapArray, KeySize: 4, ValueSize: 64, MaxEntries: 100, Flags: FlagMmapable}, (6400+page-1)/page*page + page, (6400+page-1)/page*page + page},
	} {
		most, idle := tc.s.Bytes(2)
		if most != tc.most || idle != tc.idle {
			t.Errorf("%+v: %d full, %d idle; want %d, %d", tc.s, most, idle, tc.most, tc.idle)
		}
	}
}
