//go:build linux && (amd64 || arm64)

package usdt

import (
	"testing"

	"github.com/spanwatch/spanwatch/bpf"
)

// TestCookieFitsSources checks that every index of usdt_sources fits the
// fast-path cookie's source field: a source past cookieSourceMask would
// be read back as another one.
func TestCookieFitsSources(t *testing.T) {
	spec, err := bpf.LoadUsdt()
	if err != nil {
		t.Fatal(err)
	}
	n := spec.Maps["usdt_sources"].MaxEntries
	if n == 0 || n-1 > cookieSourceMask {
		t.Fatalf("usdt_sources has %d entries, the cookie holds source indexes up to %d", n, cookieSourceMask)
	}
	if cookieFast>>cookieSourceShift&uint64(cookieSourceMask) != 0 {
		t.Fatalf("cookieFast %#x overlaps the source field (bits %d..)", cookieFast, cookieSourceShift)
	}
	if cookieSourceShift < 32 {
		t.Fatalf("the source field (bit %d) overlaps the spec id in the low 32 bits", cookieSourceShift)
	}
}
