package function

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/funcs"
	"github.com/spanwatch/spanwatch/internal/glob"
	"github.com/spanwatch/spanwatch/internal/spanevent"
	"github.com/spanwatch/spanwatch/internal/srcspec"
	"github.com/spanwatch/spanwatch/internal/userfile"
)

// A Target is the functions of one binary to trace.
type Target struct {
	// Binary is the executable or shared library; every process that
	// runs it is traced. "" when Process selects the binaries.
	Binary string
	// Process selects the binaries by the processes running them: the
	// executables whose file name (the last component of /proc/PID/exe)
	// it matches, in any mount namespace, found by a scan of /proc when
	// the source attaches and every scan interval after; nil when Binary
	// names the binary. A process's comm is not matched.
	Process *glob.Glob
	// PID limits the target to one process: its executable (opened
	// through /proc/PID/exe), or with Binary a file in its mount
	// namespace (a shared library it maps), with the uprobes attached
	// for that process only; 0 for none.
	PID int
	// Functions matches the functions to trace by name or demangled
	// name (internal/funcs.Options.Filter).
	Functions *glob.Glob
	// Span names the spans; "" names each after its function.
	Span string
	// Labels label each call's span with values of its arguments, read
	// at the entry: label i reads LabelOperands[i] (Labels.List[i].Operand
	// is i).
	Labels        srcspec.Labels
	LabelOperands []Operand
	// Error marks a call as an error when it holds over the results
	// read at the return: operand i is Results[i]. Nil: never.
	Error   *srcspec.Predicate
	Results []Operand
	// Returns is how the returns are seen; "" is ReturnsInstructions.
	Returns Returns
	// Declared is where the configuration declares it (file:line:col).
	Declared string
}

// Describe names the target for messages: "functions FUNCTION in
// BINARY", or "functions FUNCTION in processes named GLOB".
func (t *Target) Describe() string {
	switch {
	case t.PID != 0 && t.Binary != "":
		return fmt.Sprintf("functions %s in %s of pid %d", t.Functions, t.Binary, t.PID)
	case t.PID != 0:
		return fmt.Sprintf("functions %s in pid %d", t.Functions, t.PID)
	}
	if t.Process != nil {
		return fmt.Sprintf("functions %s in processes named %s", t.Functions, t.Process)
	}
	return fmt.Sprintf("functions %s in %s", t.Functions, t.Binary)
}

// targetKeys are the keys of an entry of sources.functions.
var targetKeys = []string{"binary", "process", "pid", "function", "span", "labels", "label_cap", "error", "returns"}

// DecodeSources decodes the functions: list of the sources: section,
// each entry a binary or a glob of process names, a function name or
// glob, and an optional span name. Relative binary paths are relative
// to the file. A binary that can be read is checked as the agent would attach it: the pattern must
// match at least one function that can be traced (spanwatch functions
// lists them, and why others cannot). Errors go to d, with their
// positions; on any, it returns nil.
func DecodeSources(d *section.Decoder, n *yaml.Node) []Target {
	n = section.Resolve(n)
	if section.IsNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.Errorf(n, "sources.functions must be a list of binaries and their functions, not %s", section.KindName(n))
		return nil
	}
	before := d.Len()
	var out []Target
	for _, item := range n.Content {
		if t, ok := decodeTarget(d, item); ok {
			out = append(out, t)
		}
	}
	if d.Len() > before {
		return nil
	}
	return out
}

func decodeTarget(d *section.Decoder, n *yaml.Node) (Target, bool) {
	t := Target{Declared: section.At(d.File, n).String()}
	has := map[string]*yaml.Node{}
	before := d.Len()
	ok := d.Fields(n, "a functions source", targetKeys, func(key string, _, v *yaml.Node) {
		has[key] = v
		switch key {
		case "labels":
			t.Labels.List, _ = srcspec.DecodeLabelsFunc(d, section.Resolve(v), func(name string, v *yaml.Node) (int, bool) {
				op, ok := labelOperand(d, name, v)
				if !ok {
					return 0, false
				}
				t.LabelOperands = append(t.LabelOperands, op)
				return len(t.LabelOperands) - 1, true
			})
			return
		case "label_cap":
			t.Labels.Cap, _ = srcspec.DecodeLabelCap(d, section.Resolve(v))
			return
		case "error":
			t.Error = srcspec.DecodePredicate(d, section.Resolve(v), errorResolver(&t))
			return
		case "pid":
			t.PID, _ = decodePID(d, section.Resolve(v))
			return
		case "returns":
			t.Returns, _ = decodeReturns(d, v)
			return
		}
		s, ok := str(d, v, key)
		if !ok {
			return
		}
		switch key {
		case "binary":
			t.Binary = s
		case "process":
			g, err := compileProcess(s)
			if err != nil {
				d.Errorf(v, "process %q: %v", s, err)
				return
			}
			t.Process = g
		case "function":
			g, err := glob.Compile(s)
			if err != nil {
				d.Errorf(v, "function %q: %v", s, err)
				return
			}
			t.Functions = g
		case "span":
			if len(s) > spanevent.NameLen-1 {
				d.Errorf(v, "span %q is %d bytes, more than %d", s, len(s), spanevent.NameLen-1)
				return
			}
			t.Span = s
		}
	})
	if !ok || d.Len() > before {
		return Target{}, false
	}
	switch {
	case has["binary"] == nil && has["process"] == nil && has["pid"] == nil:
		d.Errorf(n, "a functions source needs binary: (a file), process: (a glob of executable names) or pid: (one process)")
	case has["binary"] != nil && has["process"] != nil:
		d.Errorf(has["process"], "a functions source takes binary: or process:, not both")
	case has["pid"] != nil && has["process"] != nil:
		d.Errorf(has["pid"], "a functions source takes pid: (one process) or process: (every process of an executable's name), not both")
	case has["pid"] != nil && t.Binary != "" && !filepath.IsAbs(t.Binary):
		d.Errorf(has["binary"], "with pid:, binary: is a path in that process's mount namespace (a library it maps, as /proc/PID/maps names it): give it absolute, not %q", t.Binary)
	}
	if has["function"] == nil {
		d.Errorf(n, "a functions source needs function:")
	}
	if has["label_cap"] != nil && has["labels"] == nil {
		d.Errorf(has["label_cap"], "label_cap without labels:")
	}
	if d.Len() > before {
		return Target{}, false
	}
	if t.Process != nil || t.PID != 0 {
		// The binaries are those processes run when the agent scans,
		// or the process's, when it attaches: none need run now.
		return t, true
	}
	if !filepath.IsAbs(t.Binary) {
		t.Binary = filepath.Join(filepath.Dir(d.File), t.Binary)
	}
	checkTarget(d, has, t)
	return t, d.Len() == before
}

// checkTimeout bounds reading a binary to check it (as funcs.Open's).
const checkTimeout = 30 * time.Second

// checkTarget lists the target's functions as the agent would: a binary
// that cannot be read here is left to the agent (check may run on
// another machine than the agent), but one that is read must have a
// traceable function matching the pattern.
func checkTarget(d *section.Decoder, has map[string]*yaml.Node, t Target) {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	fh, b, err := OpenBinary(ctx, t.Binary, funcs.Options{Filter: t.Functions})
	if err != nil {
		return
	}
	defer fh.Close()
	defer b.Close()
	f := b.Funcs
	if f.Go {
		if err := goTraceable(f); err != nil {
			d.Errorf(has["binary"], "%s: %v", t.Binary, err)
			return
		}
	}
	if err := checkUretprobe(&t, f); err != nil {
		d.Errorf(has["returns"], "%s: %v", t.Binary, err)
		return
	}
	if err := t.checkABI(f.Go, string(f.Arch)); err != nil {
		reportABI(d, has, t, err.(*abiError))
		return
	}
	if t.namesParams() && !checkParams(d, has, t, fh, b) {
		return
	}
	var refused []string
	for _, fn := range f.Funcs {
		if fn.Refused == "" {
			return
		}
		if len(refused) < 3 {
			refused = append(refused, fmt.Sprintf("%s: %s", fn.DisplayName(), fn.Refused))
		}
	}
	if len(refused) > 0 {
		d.Errorf(has["function"], "no function of %s matching %q can be traced (%v; spanwatch functions %s --filter %q says why)", t.Binary, t.Functions, refused, t.Binary, t.Functions)
		return
	}
	d.Errorf(has["function"], "no function of %s matches %q (spanwatch functions %s lists them)", t.Binary, t.Functions, t.Binary)
}

// checkParams places the parameters the labels name, and the results
// the error predicate names, in each traceable function as the agent
// would when it attaches, and reports the first that cannot be at its
// label's value or at its name in the predicate.
func checkParams(d *section.Decoder, has map[string]*yaml.Node, t Target, fh *userfile.File, b *Binary) bool {
	f := b.Funcs
	params, err := ReadParams(fh, b)
	if err != nil {
		d.Errorf(has["binary"], "%s: parameters: %v", t.Binary, err)
		return false
	}
	for i, op := range t.LabelOperands {
		if op.Param == "" {
			continue
		}
		for _, fn := range f.Funcs {
			if fn.Refused != "" {
				continue
			}
			if _, err := resolveParams([]Operand{op}, params, &fn, t.Binary, f.Go, f.Arch); err != nil {
				d.Errorf(labelValue(has["labels"], t.Labels.List[i].Name), "label %s: %v", t.Labels.List[i].Name, err)
				return false
			}
		}
	}
	for i, op := range t.Results {
		if op.Param == "" {
			continue
		}
		for _, fn := range f.Funcs {
			if fn.Refused != "" {
				continue
			}
			if _, err := resolveResults([]Operand{op}, params, &fn, t.Binary, f.Go, f.Arch); err != nil {
				reportABI(d, has, t, &abiError{Label: -1, Result: i, msg: "error: " + err.Error()})
				return false
			}
		}
	}
	return true
}

// reportABI reports an operand the ABI does not have at the label's
// value, or at the operand in the error predicate.
func reportABI(d *section.Decoder, has map[string]*yaml.Node, t Target, e *abiError) {
	msg := fmt.Sprintf("%s: %s", t.Binary, e.msg)
	if e.Label >= 0 {
		d.Errorf(labelValue(has["labels"], t.Labels.List[e.Label].Name), "%s", msg)
		return
	}
	n := section.Resolve(has["error"])
	for _, r := range t.Error.Refs() {
		if r.Operand == e.Result && n.Kind == yaml.ScalarNode {
			d.ErrorInScalar(n, r.Offset, msg)
			return
		}
	}
	d.Errorf(n, "%s", msg)
}

// labelValue returns the value node of label name in a labels: mapping.
func labelValue(n *yaml.Node, name string) *yaml.Node {
	n = section.Resolve(n)
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == name {
				return n.Content[i+1]
			}
		}
	}
	return n
}

// maxPID is the kernel's PID_MAX_LIMIT on 64-bit machines.
const maxPID = 1 << 22

// decodePID reads pid: a process id, 1 to maxPID.
func decodePID(d *section.Decoder, n *yaml.Node) (int, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		d.Errorf(n, "pid must be a process id (an integer), not %s", section.KindName(n))
		return 0, false
	}
	v, err := strconv.ParseInt(n.Value, 0, 64)
	if err != nil || v < 1 || v > maxPID {
		d.Errorf(n, "pid must be between 1 and %d, not %s", maxPID, n.Value)
		return 0, false
	}
	return int(v), true
}

// compileProcess compiles a process: glob. It matches a file name, so a
// '/' in it could never match: that is a mistake, said so.
func compileProcess(s string) (*glob.Glob, error) {
	g, err := glob.Compile(s)
	if err != nil {
		return nil, err
	}
	if strings.Contains(s, "/") {
		return nil, errors.New("matches the executable's file name, which has no '/': give the name alone (binary: takes a path)")
	}
	return g, nil
}

func str(d *section.Decoder, n *yaml.Node, what string) (string, bool) {
	n = section.Resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.Errorf(n, "%s must be a string, not %s", what, section.KindName(n))
		return "", false
	}
	if n.Value == "" {
		d.Errorf(n, "%s must not be empty", what)
		return "", false
	}
	return n.Value, true
}
