//go:build linux

package function

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/funcs"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/internal/srcspec"
	"github.com/spanwatch/spanwatch/internal/userfile"
	"github.com/spanwatch/spanwatch/snapshot"
	"github.com/spanwatch/spanwatch/source"
)

// MaxFunctions is how many functions one source object traces
// (FUNC_MAX_SOURCES in bpf/funcs.bpf.c).
const MaxFunctions = int(bpf.FuncsFuncSizesFUNC_MAX_SOURCES)

// A Traced is one attached function.
type Traced struct {
	Binary string
	Func   funcs.Func
	Span   string
}

// A Source is the attached function spans. Close detaches them.
type Source struct {
	coll       *ebpf.Collection
	links      []link.Link
	traced     []Traced
	stopCounts func()
	labelSets  []uint16
	freeSet    func(uint16)
	strings    sync.Map // string label hash -> string
	labelCaps  int      // the caps of the labels of the traced functions, summed
}

// Attach loads the functions object beside the core and attaches every
// traceable function the targets match: an entry uprobe and a uprobe on
// each return instruction. Functions that cannot be traced (a tail call,
// no return instruction: internal/funcs.Reason) are logged and left out;
// a target that matches no traceable function is an error. The caller
// closes the returned source before the collector.
func Attach(ctx context.Context, core *source.Core, targets []Target) (_ *Source, err error) {
	if core.Kernel.Core == kernel.CoreCompat {
		return nil, errors.New("function spans need the full core (kernel 5.17+); this kernel runs the compat one")
	}
	if p := core.Kernel.Probes; p != nil && !p.Has(kernel.AttachCookie) {
		return nil, errors.New("function spans need BPF attach cookies on uprobes (kernel 5.15+)")
	}
	spec, err := bpf.LoadFuncs()
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	coll, err := source.LoadBeside("functions", spec, core.Maps, "func_entry", "func_return")
	if err != nil {
		return nil, err
	}
	s := &Source{coll: coll, freeSet: core.FreeLabelSet}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	for _, t := range targets {
		if err := s.attach(ctx, core, t); err != nil {
			return nil, err
		}
	}
	if core.AddCounts != nil {
		s.stopCounts = core.AddCounts(s.Counts)
	}
	return s, nil
}

// attach traces the functions of one target, reading and attaching to
// the same open file (through /proc/self/fd), so that the offsets found
// are those of the file the uprobes go on, whatever its path names
// meanwhile.
func (s *Source) attach(ctx context.Context, core *source.Core, t Target) error {
	log := core.Logger
	fh, err := userfile.OpenRooted(ctx, t.Binary, userfile.Options{Symlinks: true})
	if err != nil {
		return fmt.Errorf("functions of %s: %w", t.Binary, err)
	}
	defer fh.Close()
	f, err := funcs.Parse(fh, funcs.Options{Filter: t.Functions})
	if err != nil {
		return fmt.Errorf("functions of %s: %w", t.Binary, err)
	}
	if f.Go {
		if err := goTraceable(f); err != nil {
			return fmt.Errorf("functions of %s: %w", t.Binary, err)
		}
	}
	if err := t.checkABI(f.Go, string(f.Arch)); err != nil {
		return fmt.Errorf("functions of %s: %w", t.Binary, err)
	}
	ex, err := link.OpenExecutable(fmt.Sprintf("/proc/self/fd/%d", fh.Fd()))
	if err != nil {
		return fmt.Errorf("functions of %s: %w", t.Binary, err)
	}
	entry, ret := s.coll.Programs["func_entry"], s.coll.Programs["func_return"]
	n := 0
	for _, fn := range f.Funcs {
		if fn.Refused != "" {
			if log != nil {
				log.Warn("function_refused", "binary", t.Binary, "function", fn.DisplayName(), "reason", string(fn.Refused), "detail", fn.Detail)
			}
			continue
		}
		idx := uint32(len(s.traced))
		if int(idx) >= MaxFunctions {
			return fmt.Errorf("functions of %s: more than %d functions to trace: narrow the pattern %q", t.Binary, MaxFunctions, t.Functions)
		}
		name := t.Span
		if name == "" {
			name = fn.DisplayName()
		}
		var buf [snapshot.NameLen]byte
		copy(buf[:snapshot.NameLen-1], snapshot.TruncateName(name))
		src := bpf.FuncsFuncSource{NameId: snapshot.NameIDBytes(&buf)}
		if f.Go {
			src.Go = 1
		}
		for i, c := range buf {
			src.Name[i] = int8(c)
		}
		if err := s.encodeArgs(core, t, &src); err != nil {
			return fmt.Errorf("functions of %s: %s: %w", t.Binary, fn.DisplayName(), err)
		}
		if err := s.coll.Maps["func_sources"].Put(idx, &src); err != nil {
			return fmt.Errorf("functions of %s: %s: %w", t.Binary, fn.DisplayName(), err)
		}
		// Returns first: an entry without its returns attached would
		// leave open calls behind.
		for _, off := range fn.Returns {
			l, err := ex.Uprobe("", ret, &link.UprobeOptions{Address: off, Cookie: uint64(idx)})
			if err != nil {
				return fmt.Errorf("functions of %s: %s: return at %#x: %w", t.Binary, fn.DisplayName(), off, err)
			}
			s.links = append(s.links, l)
		}
		l, err := ex.Uprobe("", entry, &link.UprobeOptions{Address: fn.Entry, Cookie: uint64(idx)})
		if err != nil {
			return fmt.Errorf("functions of %s: %s: entry at %#x: %w", t.Binary, fn.DisplayName(), fn.Entry, err)
		}
		s.links = append(s.links, l)
		s.traced = append(s.traced, Traced{Binary: t.Binary, Func: fn, Span: name})
		n++
	}
	if n == 0 {
		return fmt.Errorf("functions of %s: no traceable function matches %q (spanwatch functions %s lists them)", t.Binary, t.Functions, t.Binary)
	}
	return nil
}

// encodeArgs puts a target's labels and error predicate in src: each
// traced function's labels get a label set of their own (its caps are
// its own, as a USDT source's are).
func (s *Source) encodeArgs(core *source.Core, t Target, src *bpf.FuncsFuncSource) error {
	if t.Error != nil {
		src.HasError = 1
		p := t.Error.Encode()
		src.Error = *(*bpf.FuncsSrcPred)(unsafe.Pointer(&p))
		for i, op := range t.Results {
			src.Result[i] = encodeOperand(op)
		}
	}
	if len(t.Labels.List) == 0 {
		return nil
	}
	if core.AllocStringLabelSet == nil {
		return errors.New("labels: this collector keeps no label sets")
	}
	s.labelCaps += len(t.Labels.List) * t.Labels.CapOrDefault()
	if s.labelCaps > srcspec.LabelValues {
		return fmt.Errorf("labels: the traced functions' labels admit %d values in all (each label's cap, per function), more than %d: lower label_cap or narrow the pattern", s.labelCaps, srcspec.LabelValues)
	}
	signed := make([]bool, len(t.Labels.List))
	str := false
	for i, op := range t.LabelOperands {
		signed[i] = op.Kind == OperandInt && op.Signed
		str = str || op.Kind != OperandInt
		src.Label[i] = encodeOperand(op)
	}
	var named func(int, uint64) (string, bool)
	if str {
		ops := t.LabelOperands
		named = func(i int, v uint64) (string, bool) {
			if i >= len(ops) || ops[i].Kind == OperandInt {
				return "", false
			}
			return s.labelString(v)
		}
	}
	id, err := core.AllocStringLabelSet(t.Labels.Names(), signed, named)
	if err != nil {
		return fmt.Errorf("labels: %w", err)
	}
	s.labelSets = append(s.labelSets, id)
	ls := t.Labels.Encode(id)
	src.Labels = *(*bpf.FuncsSrcLabels)(unsafe.Pointer(&ls))
	return nil
}

func encodeOperand(op Operand) bpf.FuncsFuncOperand {
	o := bpf.FuncsFuncOperand{Kind: uint8(op.Kind), Reg: uint8(op.Reg), Size: uint8(op.Size)}
	if op.Kind == OperandPtrLen {
		o.LenReg = uint8(op.LenReg)
	}
	if op.Signed {
		o.IsSigned = 1
	}
	return o
}

// labelString returns the string a string label's value v (its hash)
// stands for: the bytes the entry stored in func_label_strings, up to
// the first NUL. Once found it never changes, and is cached.
func (s *Source) labelString(v uint64) (string, bool) {
	if str, ok := s.strings.Load(v); ok {
		return str.(string), true
	}
	var b bpf.FuncsFuncLabelStr
	m := s.coll.Maps["func_label_strings"]
	if m == nil || m.Lookup(v, &b) != nil {
		return "", false
	}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&b.S[0])), len(b.S))
	if i := bytes.IndexByte(raw, 0); i >= 0 {
		raw = raw[:i]
	}
	str := string(raw)
	s.strings.Store(v, str)
	return str, true
}

// Traced returns the attached functions.
func (s *Source) Traced() []Traced { return s.traced }

// Kind is "functions".
func (s *Source) Kind() string { return "functions" }

// Counts returns the source's counters since it loaded, keyed
// "functions/REASON": returns without an entry (unpaired: attached
// mid-call, or the entry was evicted), entries replaced by a call at
// the same place on the same thread or goroutine (replaced: their return
// never ran, after a longjmp, an exception or a recovered panic, or the
// goroutine exited and its g was reused), and Go entries and returns
// dropped because the g register did not lead to a goroutine's stack
// holding the stack pointer (no_goroutine), and label values keyed
// "other" (label_other past the cap, label_full, label_unread: a string
// argument that could not be read). Only nonzero counts.
func (s *Source) Counts() (map[string]uint64, error) {
	out := map[string]uint64{}
	sum := func(m string, idx uint32) (uint64, error) {
		var per []uint64
		if err := s.coll.Maps[m].Lookup(idx, &per); err != nil {
			return 0, fmt.Errorf("functions: read counters: %w", err)
		}
		var n uint64
		for _, v := range per {
			n += v
		}
		return n, nil
	}
	for name, c := range map[string]struct {
		m   string
		idx uint32
	}{
		"unpaired":     {"func_counters", uint32(bpf.FuncsFuncCounterFUNC_COUNTER_UNPAIRED)},
		"replaced":     {"func_counters", uint32(bpf.FuncsFuncCounterFUNC_COUNTER_REPLACED)},
		"no_goroutine": {"func_counters", uint32(bpf.FuncsFuncCounterFUNC_COUNTER_NO_GOROUTINE)},
		"label_other":  {"src_counters", uint32(bpf.FuncsSrcCounterSRC_COUNTER_LABEL_OTHER)},
		"label_full":   {"src_counters", uint32(bpf.FuncsSrcCounterSRC_COUNTER_LABEL_FULL)},
		"label_unread": {"src_counters", uint32(bpf.FuncsSrcCounterSRC_COUNTER_LABEL_UNREAD)},
	} {
		n, err := sum(c.m, c.idx)
		if err != nil {
			return nil, err
		}
		if n != 0 {
			out["functions/"+name] = n
		}
	}
	return out, nil
}

// Close detaches the functions and releases the object. It is
// idempotent.
func (s *Source) Close() error {
	if s.stopCounts != nil {
		s.stopCounts()
		s.stopCounts = nil
	}
	var errs []error
	for _, l := range s.links {
		errs = append(errs, l.Close())
	}
	s.links = nil
	for _, id := range s.labelSets {
		if s.freeSet != nil {
			s.freeSet(id)
		}
	}
	s.labelSets = nil
	if s.coll != nil {
		s.coll.Close()
		s.coll = nil
	}
	return errors.Join(errs...)
}

var _ source.Source = (*Source)(nil)
