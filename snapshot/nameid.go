package snapshot

import (
	"encoding/binary"
	"strings"
	"unicode/utf8"

	"github.com/spanwatch/spanwatch/internal/spanevent"
)

// NameLen is the size of a span name in the span event payload and in the
// kernel: names are at most NameLen-1 bytes, longer ones are cut
// (TruncateName) on a UTF-8 character boundary. The SDK shares it through
// internal/spanevent, so that it does not link this package.
const NameLen = spanevent.NameLen

// OtherName names a workload's overflow series: the spans of names it
// started past its series quota.
const OtherName = "(other)"

// NameID returns the id the BPF programs give a span name: a 64-bit hash of
// the name's 8-byte words up to its first NUL. It must match span_name_id()
// in bpf/aggregate.h; the collector's tests check that it does. The name is
// first cut as the kernel cuts it (TruncateName).
func NameID(name string) uint64 {
	var buf [NameLen]byte
	copy(buf[:NameLen-1], TruncateName(name))
	return NameIDBytes(&buf)
}

// NameIDBytes is NameID for a name already laid out as in the payload.
func NameIDBytes(name *[NameLen]byte) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < NameLen/8; i++ {
		x := binary.LittleEndian.Uint64(name[i*8:])
		z := (x - 0x0101010101010101) & ^x & 0x8080808080808080
		last := false
		if z != 0 {
			lowest := z & (^z + 1)
			x &= (lowest >> 7) - 1
			last = true
		}
		h ^= x
		h *= 0x100000001b3
		h ^= h >> 29 // as span_name_id: high bits folded down each word
		if last {
			break
		}
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	if h == 0 {
		return 1
	}
	return h
}

// TruncateName cuts a name to at most NameLen-1 bytes, the way the kernel
// side does (name_cut in bpf/aggregate.h): at the byte limit, or before the
// UTF-8 character that byte continues, so no character is split. A name
// with a NUL byte ends there.
func TruncateName(name string) string {
	if i := strings.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	if len(name) <= NameLen-1 {
		return name
	}
	cut := NameLen - 1
	for i := 0; i < 3 && name[cut]&0xc0 == 0x80; i++ {
		cut--
	}
	return name[:cut]
}

// NameString returns the name in a payload name field: the bytes up to the
// first NUL, or all of them, as valid UTF-8 (bytes that are not UTF-8 are
// replaced by U+FFFD, so every output — Prometheus label values, JSON,
// alert payloads — accepts it).
func NameString(name []byte) string {
	for i, c := range name {
		if c == 0 {
			name = name[:i]
			break
		}
	}
	s := string(name)
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}
