package kernel

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/cilium/ebpf"
)

// A LoadError is a BPF program the kernel's verifier refused. Its message
// names the program, the objects it belongs to and the kernel, gives the
// verifier's reason (its last line that says one), and says what to do;
// the whole log stays in Log.
type LoadError struct {
	Object  string   // the objects: "full core", "compat core", "usdt", ...
	Program string   // the refused program, when the error names it
	Release string   // the kernel's release
	Reason  string   // the verifier's reason
	Log     []string // the verifier's whole log
	Err     error
}

func (e *LoadError) Error() string {
	prog := e.Program
	if prog == "" {
		prog = "a program"
	}
	return fmt.Sprintf("%s: the kernel (%s) refuses %s of the %s objects: %s; spanwatch kernel shows what this kernel gets, "+
		"and spanwatch kernel --verifier-log the verifier's whole log: please report both", ErrRefused, e.Release, prog, e.Object, e.Reason)
}

func (e *LoadError) Unwrap() []error { return []error{ErrRefused, e.Err} }

var programName = regexp.MustCompile(`program ([A-Za-z0-9_]+):`)

// NewLoadError wraps err in a *LoadError when it is a verifier refusal
// (an *ebpf.VerifierError), and returns nil otherwise.
func NewLoadError(object, release string, err error) error {
	var verr *ebpf.VerifierError
	if !errors.As(err, &verr) {
		return nil
	}
	e := &LoadError{Object: object, Release: release, Log: verr.Log, Err: err}
	if m := programName.FindStringSubmatch(err.Error()); m != nil {
		e.Program = m[1]
	}
	e.Reason = reason(verr.Log)
	if e.Reason == "" {
		e.Reason = verr.Cause.Error()
	}
	return e
}

// reason picks the verifier's reason from its log: the last line before
// its statistics.
func reason(log []string) string {
	for i := len(log) - 1; i >= 0; i-- {
		l := strings.TrimSpace(log[i])
		switch {
		case l == "", strings.HasPrefix(l, "processed "), strings.HasPrefix(l, "verification time"),
			strings.HasPrefix(l, "stack depth"), strings.HasPrefix(l, "max_states_per_insn"):
			continue
		}
		return l
	}
	return ""
}

// VerifierLog returns the verifier's whole log of a refusal (a LoadError or
// an *ebpf.VerifierError), one line per entry; nil for other errors.
func VerifierLog(err error) []string {
	var lerr *LoadError
	if errors.As(err, &lerr) {
		return lerr.Log
	}
	var verr *ebpf.VerifierError
	if errors.As(err, &verr) {
		return verr.Log
	}
	return nil
}
