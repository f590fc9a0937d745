package eventheader

import (
	"encoding/binary"
	"strings"
)

// Field names are matched by hash in BPF: the walker hashes each name it
// passes and compares it with the hashes of the fields a source wants.
// NameHash and PathHash define those hashes; bpf/eventheader.h computes the
// same (eh_name_hash, eh_path_hash), and a test holds the two together.

const (
	fnvOffset = 0xcbf29ce484222325
	fnvPrime  = 0x100000001b3
	golden    = 0x9e3779b97f4a7c15
)

func fmix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// NameHash hashes an event or field name: FNV-1a over the name's bytes and
// its terminating NUL taken as little-endian 8-byte words (the last one
// zero-padded), then a final mix.
func NameHash(name string) uint64 {
	var buf [8]byte
	h := uint64(fnvOffset)
	b := []byte(name)
	for i := 0; ; i += 8 {
		clear(buf[:])
		done := false
		if i+8 <= len(b) {
			copy(buf[:], b[i:i+8])
		} else {
			copy(buf[:], b[i:])
			done = true // the NUL is in this word
		}
		h ^= binary.LittleEndian.Uint64(buf[:])
		h *= fnvPrime
		if done {
			break
		}
	}
	return fmix64(h)
}

// PathHash is the hash of a field named by child inside the struct whose
// path hash is parent (0 for the event's top level). It is never 0.
func PathHash(parent, child uint64) uint64 {
	h := fmix64(parent*golden ^ child)
	if h == 0 {
		h = 1
	}
	return h
}

// Path returns the hash of a field path: struct names, then the field's.
func Path(names ...string) uint64 {
	var h uint64
	for _, n := range names {
		h = PathHash(h, NameHash(n))
	}
	return h
}

// SplitPath splits a dotted path such as "PartB.name". A field name that
// contains dots (OpenTelemetry attribute names in PartC do: "http.route")
// cannot be written this way; give the path as a list instead.
func SplitPath(path string) []string {
	return strings.Split(path, ".")
}
