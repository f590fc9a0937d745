//go:build linux

package function

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/funcs"
	"github.com/spanwatch/spanwatch/internal/kernel"
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
	s := &Source{coll: coll}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	for _, t := range targets {
		if err := s.attach(ctx, core.Logger, t); err != nil {
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
func (s *Source) attach(ctx context.Context, log *slog.Logger, t Target) error {
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
// holding the stack pointer (no_goroutine). Only nonzero counts.
func (s *Source) Counts() (map[string]uint64, error) {
	out := map[string]uint64{}
	for name, idx := range map[string]bpf.FuncsFuncCounter{
		"unpaired":     bpf.FuncsFuncCounterFUNC_COUNTER_UNPAIRED,
		"replaced":     bpf.FuncsFuncCounterFUNC_COUNTER_REPLACED,
		"no_goroutine": bpf.FuncsFuncCounterFUNC_COUNTER_NO_GOROUTINE,
	} {
		var per []uint64
		if err := s.coll.Maps["func_counters"].Lookup(uint32(idx), &per); err != nil {
			return nil, fmt.Errorf("functions: read counters: %w", err)
		}
		var sum uint64
		for _, v := range per {
			sum += v
		}
		if sum != 0 {
			out["functions/"+name] = sum
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
	if s.coll != nil {
		s.coll.Close()
		s.coll = nil
	}
	return errors.Join(errs...)
}

var _ source.Source = (*Source)(nil)
