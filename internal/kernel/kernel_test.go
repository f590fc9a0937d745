package kernel

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
)

func TestParseVersion(t *testing.T) {
	for release, want := range map[string]Version{
		"6.1.0-57-cloud-amd64":         {6, 1, 0},
		"5.10.251":                     {5, 10, 251},
		"6.12.118+deb12-rt-amd64":      {6, 12, 118},
		"6.18.44-fc-v1147":             {6, 18, 44},
		"5.14.0-427.13.1.el9_4.x86_64": {5, 14, 0},
	} {
		got, err := ParseVersion(release)
		if err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", release, got, err, want)
		}
	}
	for _, bad := range []string{"", "six", "6"} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q): no error", bad)
		}
	}
	if !(Version{5, 10, 0}).Less(Version{5, 12, 0}) || (Version{6, 1, 0}).Less(Version{5, 17, 0}) {
		t.Error("Less is wrong")
	}
}

// fake makes the probes of a kernel of release that has the features of
// have (the others refused).
func fake(release string, have ...Feature) *Probes {
	p := &Probes{Release: release, Results: map[Feature]Result{}}
	p.Version, _ = ParseVersion(release)
	for _, f := range Features {
		p.Results[f] = Result{Err: fmt.Errorf("%w: fake", ebpf.ErrNotSupported)}
	}
	for _, f := range have {
		p.Results[f] = Result{Have: true}
	}
	return p
}

// The features of Debian's kernels, as the probes found them in the VM
// (docs/kernels.md).
var (
	debian510 = []Feature{BTF, RingBuf, MmapArray, Uprobes}
	debian61  = append(debian510, Atomics, Loop, TaskStorage, AttachCookie, SleepableUprobe, CopyFromUserTask, FentryPerfTp)
	debian612 = append(debian61, SleepableQueue, UprobeMulti, CopyFromUserStr)
)

func states(rows []Row) map[string]State {
	m := map[string]State{}
	for _, r := range rows {
		m[r.Name] = r.State
	}
	return m
}

func TestRowsByKernel(t *testing.T) {
	for _, tc := range []struct {
		p    *Probes
		core Core
		want map[string]State
	}{
		{fake("5.10.251", debian510...), CoreCompat, map[string]State{
			"aggregation core": Replaced, "exact min and max": Declined, "USDT call sites told apart": Replaced,
			"USDT nested pairing by thread": Replaced, "glob budgets from a name's first span": Replaced,
			"in-flight samples (spans still running)": Declined, "user_events spans": Declined,
			"uprobes without CAP_SYS_ADMIN": Replaced, "stacks at the overrun": Works, "marker spans (Go SDK without user_events)": Works,
		}},
		{fake("6.1.192", debian61...), CoreFull, map[string]State{
			"aggregation core": Works, "exact min and max": Works, "USDT call sites told apart": Works,
			"USDT names on pages not yet resident": Works, "USDT single probes' names on pages not yet resident": Replaced,
			"in-flight samples (spans still running)": Works, "uprobes without CAP_SYS_ADMIN": Replaced,
		}},
		{fake("6.12.118", append(debian612, UserEvents)...), CoreFull, map[string]State{
			"USDT single probes' names on pages not yet resident": Works, "user_events spans": Works, "uprobes without CAP_SYS_ADMIN": Works,
		}},
	} {
		core, err := tc.p.ChooseCore()
		if err != nil || core != tc.core {
			t.Fatalf("%s: core %s, %v; want %s", tc.p.Release, core, err, tc.core)
		}
		got := states(Rows(Facts{Probes: tc.p, Core: core}))
		for name, st := range tc.want {
			if s, ok := got[name]; !ok {
				t.Errorf("%s: no row %q", tc.p.Release, name)
			} else if s != st {
				t.Errorf("%s: %q is %s, want %s", tc.p.Release, name, s, st)
			}
		}
		for _, r := range Rows(Facts{Probes: tc.p, Core: core}) {
			if r.State != Works && r.Why == "" {
				t.Errorf("%s: %q is %s without a reason", tc.p.Release, r.Name, r.State)
			}
			if r.Test == "" || !strings.Contains(r.Test, " Test") {
				t.Errorf("%s: %q names no test: %q", tc.p.Release, r.Name, r.Test)
			}
		}
	}
}

func TestChooseCoreRefusesOldKernels(t *testing.T) {
	_, err := fake("4.19.0", BTF, Uprobes).ChooseCore()
	if !errors.Is(err, ebpf.ErrNotSupported) || !strings.Contains(err.Error(), "5.10") {
		t.Fatalf("ChooseCore on 4.19: %v, want ErrNotSupported naming 5.10", err)
	}
}

func TestExpected(t *testing.T) {
	p := fake("6.1.0-57-cloud-amd64", debian61...)
	if !p.Expected(Loop) || p.Expected(UprobeMulti) || p.Expected(UserEvents) {
		t.Fatalf("6.1 expects bpf_loop %v (want true), uprobe_multi %v (want false), user_events %v (want false: a build option)",
			p.Expected(Loop), p.Expected(UprobeMulti), p.Expected(UserEvents))
	}
	if u := p.Unexpected(); len(u) != 0 {
		t.Fatalf("Debian 6.1's features: unexpected misses %v", u)
	}
	q := fake("6.1.0-57-cloud-amd64", debian510...)
	if u := q.Unexpected(); len(u) == 0 {
		t.Fatal("a 6.1 kernel without bpf_loop: no unexpected miss")
	}
}

func TestLogArgsOneLine(t *testing.T) {
	p := fake("5.10.251", debian510...)
	args := LogArgs(Facts{Probes: p, Core: CoreCompat})
	line := fmt.Sprint(args...)
	for _, want := range []string{"5.10.251", "compat", "replaced", "declined", "exact min and max", "no BPF atomics"} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, "\n") {
		t.Errorf("log line has a newline: %q", line)
	}
}

func TestLoadErrorNamesProgramAndKernel(t *testing.T) {
	verr := &ebpf.VerifierError{Cause: errors.New("permission denied"), Log: []string{
		"Validating series_create() func#4...",
		"R2 type=mem expected=fp, pkt, pkt_meta, map_key, map_value",
		"processed 1651 insns (limit 1000000) max_states_per_insn 6 total_states 92",
	}}
	err := fmt.Errorf("program uprobe_marker: load program: %w", verr)
	lerr := NewLoadError("full core", "6.1.0-57-cloud-amd64", err)
	msg := lerr.Error()
	for _, want := range []string{"uprobe_marker", "6.1.0-57-cloud-amd64", "full core", "R2 type=mem", "spanwatch kernel --verifier-log"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "processed") {
		t.Errorf("%q carries the raw log", msg)
	}
	if !errors.Is(lerr, ErrRefused) || !errors.As(lerr, &verr) || len(VerifierLog(lerr)) != 3 {
		t.Errorf("LoadError does not unwrap to ErrRefused and the VerifierError with its log")
	}
	if NewLoadError("x", "y", errors.New("EPERM")) != nil {
		t.Error("a load error that is no verifier refusal became a LoadError")
	}
}
