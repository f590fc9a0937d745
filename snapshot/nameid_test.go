package snapshot

import "testing"

// TestNameIDHighBits checks names that differ only in the top bit of two
// of their 8-byte words: a multiply-only hash gives them one id (the flips
// cancel in bit 63), which merged two series.
func TestNameIDHighBits(t *testing.T) {
	a := []byte("AAAAAAAhBBBBBBBx")
	b := append([]byte(nil), a...)
	b[7] ^= 0x80
	b[15] ^= 0x80
	if NameID(string(a)) == NameID(string(b)) {
		t.Fatalf("%q and %q share id %x", a, b, NameID(string(a)))
	}
	seen := map[uint64]string{}
	for i := 0; i < 16; i++ {
		for j := i + 1; j < 16; j++ {
			n := append([]byte(nil), a...)
			n[i] ^= 0x80
			n[j] ^= 0x80
			id := NameID(string(n))
			if prev, dup := seen[id]; dup {
				t.Fatalf("%q and %q share id %x", prev, n, id)
			}
			seen[id] = string(n)
		}
	}
}
