//go:build linux

package kernel

import (
	"os"
	"testing"
)

// TestProbeFindsWhatTheReleaseHas probes this kernel and fails on a
// feature its release should have (mainline) and the probe says it has
// not, or cannot tell as root: on each kernel of the matrix, every probe
// must work as the release says.
func TestProbeFindsWhatTheReleaseHas(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the probes load BPF programs")
	}
	p := Probe()
	if p.Version == (Version{}) {
		t.Fatalf("release %q: no version", p.Release)
	}
	for _, f := range Features {
		r := p.Results[f]
		t.Logf("%-22s have=%-5v unknown=%-5v %v", f, r.Have, r.Unknown, r.Err)
		if r.Unknown {
			t.Errorf("%s: the probe could not tell as root: %v", f, r.Err)
		}
	}
	if u := p.Unexpected(); len(u) > 0 {
		t.Errorf("kernel %s should have %v (their mainline releases are older), the probes say not", p.Release, u)
	}
	if _, err := p.ChooseCore(); err != nil {
		t.Errorf("no core objects for kernel %s: %v", p.Release, err)
	}
}
