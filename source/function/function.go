//go:build linux

package function

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"
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
	// Binary is the file's path: as the target names it, or for a
	// process: target, as the first process found running it sees it.
	Binary string
	// PID is that process; 0 for a binary: target.
	PID  int
	Func funcs.Func
	Span string
}

// A Source is the attached function spans. Close detaches them.
type Source struct {
	coll       *ebpf.Collection
	core       *source.Core
	stopCounts func()
	freeSet    func(uint16)
	strings    sync.Map // string label hash -> string

	// mu guards what follows: a scan (process: targets) attaches and
	// releases files while Traced and Close run.
	mu        sync.Mutex
	closed    bool
	links     []link.Link // binary: targets'
	traced    []Traced    // binary: targets'
	entries   map[entryKey]uint32
	labelSets []uint16
	labelCaps int // the caps of the labels of the traced functions, summed
	// procTargets are the process: targets (their places in the
	// configuration's list, for the entries' keys); files, the files
	// their processes run, each attached once.
	procTargets []procTarget
	files       map[fileKey]*procFile

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// An entryKey is what makes one func_sources entry (one attach cookie):
// a target's function by its span's name. Every file a process: target
// attaches shares its functions' entries, and so their label sets; an
// entry lives as long as the source.
type entryKey struct {
	target int
	name   string
	span   string
	goABI  bool
	// args are the label and result operands as placed from DWARF (a
	// parameter's register may differ between two files a process:
	// target runs).
	args string
}

type procTarget struct {
	index int // in the configured list
	t     Target
}

// fileKey identifies a file one process: target attached, whatever path
// or mount namespace its processes see it through (as source/marker's).
type fileKey struct {
	target   int
	dev, ino uint64
	mtime    int64
	size     int64
}

// A procFile is a file a process: target's processes run: its links, or
// none when it has no traceable function (remembered, so it is not read
// again at every scan).
type procFile struct {
	links  []link.Link
	traced []Traced
	// missed counts the scans in a row that found no matching process
	// running it; at source.ReleaseScans it is let go.
	missed int
}

// scanTimeout bounds checking and attaching one file a process runs:
// a file on a file system that stopped answering is skipped and tried
// again at the next scan.
const scanTimeout = 10 * time.Second

// Attach loads the functions object beside the core and attaches every
// traceable function the targets match: an entry uprobe and a uprobe on
// each return instruction (or a uretprobe: Target.Returns). Functions that cannot be traced (a tail call,
// no return instruction: internal/funcs.Reason) are logged and left out;
// a binary: target that matches no traceable function is an error.
// process: targets attach to the files the matching processes run,
// found by a scan of /proc now and every Core.ScanInterval after (or
// when Scan is called); a process: target that matches no process, or a
// file without a traceable function, is not an error. The caller closes
// the returned source before the collector.
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
	coll, err := source.LoadBeside("functions", spec, core.Maps, "func_entry", "func_return", "func_uretprobe")
	if err != nil {
		return nil, err
	}
	s := &Source{coll: coll, core: core, freeSet: core.FreeLabelSet, entries: map[entryKey]uint32{}, files: map[fileKey]*procFile{}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	for i, t := range targets {
		if t.Process != nil {
			s.procTargets = append(s.procTargets, procTarget{index: i, t: t})
			continue
		}
		attach := s.attach
		if t.PID != 0 {
			attach = s.attachPID
		}
		if err := attach(ctx, i, t); err != nil {
			return nil, err
		}
	}
	if core.AddCounts != nil {
		s.stopCounts = core.AddCounts(s.Counts)
	}
	if len(s.procTargets) > 0 {
		s.Scan()
		if core.ScanInterval > 0 {
			lctx, cancel := context.WithCancel(context.Background())
			s.cancel = cancel
			s.wg.Add(1)
			go func() { defer s.wg.Done(); source.Every(lctx, core.ScanInterval, s.Scan) }()
		}
	}
	return s, nil
}

// attach traces the functions of one binary: target, reading and
// attaching to the same open file (through /proc/self/fd), so that the
// offsets found are those of the file the uprobes go on, whatever its
// path names meanwhile.
func (s *Source) attach(ctx context.Context, ti int, t Target) error {
	fh, err := userfile.OpenRooted(ctx, t.Binary, userfile.Options{Symlinks: true})
	if err != nil {
		return fmt.Errorf("functions of %s: %w", t.Binary, err)
	}
	defer fh.Close()
	b, err := ParseBinary(fh, funcs.Options{Filter: t.Functions}, binaryPlace(ctx, t.Binary, fh))
	if err != nil {
		return fmt.Errorf("functions of %s: %w", t.Binary, err)
	}
	defer b.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	links, traced, err := s.attachFile(ti, t, fh, b, t.Binary, 0)
	s.links = append(s.links, links...)
	s.traced = append(s.traced, traced...)
	if err != nil {
		return err
	}
	if len(traced) == 0 {
		return fmt.Errorf("functions of %s: no traceable function matches %q (spanwatch functions %s lists them)", t.Binary, t.Functions, t.Binary)
	}
	return nil
}

// attachFile attaches the traceable functions of b, parsed from the open
// file fh, as target t says: path names the file in messages, pid the
// process it was found through (0: none). It returns the links made, and
// the functions traced, also on an error. s.mu is held.
func (s *Source) attachFile(ti int, t Target, fh *userfile.File, b *Binary, path string, pid int) ([]link.Link, []Traced, error) {
	log := s.core.Logger
	f := b.Funcs
	if f.Go {
		if err := goTraceable(f); err != nil {
			return nil, nil, fmt.Errorf("functions of %s: %w", path, err)
		}
	}
	if err := t.checkABI(f.Go, string(f.Arch)); err != nil {
		return nil, nil, fmt.Errorf("functions of %s: %w", path, err)
	}
	if err := checkUretprobe(&t, f); err != nil {
		return nil, nil, fmt.Errorf("functions of %s: %w", path, err)
	}
	if t.Returns == ReturnsUretprobe && log != nil {
		if found := exceptionTables(fh); len(found) > 0 {
			log.Warn("function_uretprobe_unwind", "binary", path, "source", t.Describe(), "pos", t.Declared, "reason", uretprobeWarning(found))
		}
	}
	var params *ParamTable
	if t.namesParams() {
		p, err := ReadParams(fh, b)
		if err != nil {
			return nil, nil, fmt.Errorf("functions of %s: parameters: %w", path, err)
		}
		params = p
	}
	ex, err := link.OpenExecutable(fmt.Sprintf("/proc/self/fd/%d", fh.Fd()))
	if err != nil {
		return nil, nil, fmt.Errorf("functions of %s: %w", path, err)
	}
	entry, ret := s.coll.Programs["func_entry"], s.coll.Programs["func_return"]
	var links []link.Link
	var traced []Traced
	for _, fn := range f.Funcs {
		if fn.Refused != "" {
			if log != nil {
				log.Warn("function_refused", "binary", path, "function", fn.DisplayName(), "reason", string(fn.Refused), "detail", fn.Detail)
			}
			continue
		}
		name := t.Span
		if name == "" {
			name = fn.DisplayName()
		}
		// Parameters named are placed per function, before any is
		// attached: a name that cannot be placed is an error, never a
		// wrong register.
		ft := t
		ft.LabelOperands, err = resolveParams(t.LabelOperands, params, &fn, path, f.Go, f.Arch)
		if err == nil {
			ft.Results, err = resolveResults(t.Results, params, &fn, path, f.Go, f.Arch)
		}
		if err != nil {
			return links, traced, fmt.Errorf("functions of %s: %w", path, err)
		}
		idx, err := s.entry(ti, ft, fn.DisplayName(), name, f.Go)
		if err != nil {
			return links, traced, fmt.Errorf("functions of %s: %s: %w", path, fn.DisplayName(), err)
		}
		// Returns first: an entry without its returns attached would
		// leave open calls behind.
		rets := fn.Returns
		if t.Returns == ReturnsUretprobe {
			l, err := ex.Uretprobe("", s.coll.Programs["func_uretprobe"], &link.UprobeOptions{Address: fn.Offset, Cookie: uint64(idx), PID: t.PID})
			if err != nil {
				return links, traced, fmt.Errorf("functions of %s: %s: uretprobe at %#x: %w", path, fn.DisplayName(), fn.Offset, err)
			}
			links = append(links, l)
			rets = nil
		}
		for _, off := range rets {
			l, err := ex.Uprobe("", ret, &link.UprobeOptions{Address: off, Cookie: uint64(idx), PID: t.PID})
			if err != nil {
				return links, traced, fmt.Errorf("functions of %s: %s: return at %#x: %w", path, fn.DisplayName(), off, err)
			}
			links = append(links, l)
		}
		l, err := ex.Uprobe("", entry, &link.UprobeOptions{Address: fn.Entry, Cookie: uint64(idx), PID: t.PID})
		if err != nil {
			return links, traced, fmt.Errorf("functions of %s: %s: entry at %#x: %w", path, fn.DisplayName(), fn.Entry, err)
		}
		links = append(links, l)
		traced = append(traced, Traced{Binary: path, PID: pid, Func: fn, Span: name})
	}
	return links, traced, nil
}

// entry returns the func_sources index (the attach cookie) of target
// ti's function fn, named span, putting the entry in the map the first
// time. s.mu is held.
func (s *Source) entry(ti int, t Target, fn, span string, goABI bool) (uint32, error) {
	k := entryKey{target: ti, name: fn, span: span, goABI: goABI, args: fmt.Sprint(t.LabelOperands, t.Results)}
	if idx, ok := s.entries[k]; ok {
		return idx, nil
	}
	idx := uint32(len(s.entries))
	if int(idx) >= MaxFunctions {
		return 0, fmt.Errorf("more than %d functions to trace: narrow the pattern %q", MaxFunctions, t.Functions)
	}
	var buf [snapshot.NameLen]byte
	copy(buf[:snapshot.NameLen-1], snapshot.TruncateName(span))
	src := bpf.FuncsFuncSource{NameId: snapshot.NameIDBytes(&buf)}
	if goABI {
		src.Go = 1
	}
	for i, c := range buf {
		src.Name[i] = int8(c)
	}
	if err := s.encodeArgs(s.core, t, &src); err != nil {
		return 0, err
	}
	if err := s.coll.Maps["func_sources"].Put(idx, &src); err != nil {
		return 0, err
	}
	s.entries[k] = idx
	return idx, nil
}

// Scan looks at the executable of every process (source.Processes) and
// attaches the process: targets whose glob matches its file name to the
// file, once per file (by device, inode, size and modification time),
// opened through the process's /proc/PID/exe: the very file it runs, as
// its mount namespace has it, with no path of the user's followed. Then
// it lets go of the files no matching process ran in the last
// source.ReleaseScans scans.
func (s *Source) Scan() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.procTargets) == 0 {
		return
	}
	log := s.core.Logger
	procs, err := source.Processes(s.core.ProcRoot)
	if err != nil {
		// Nothing is released on a scan that could not look.
		if log != nil {
			log.Warn("proc_scan_failed", "error", err)
		}
		return
	}
	seen := map[fileKey]bool{}
	for _, p := range procs {
		exe, ok := source.Exe(p.Dir)
		if !ok {
			continue
		}
		name := filepath.Base(exe)
		for _, pt := range s.procTargets {
			if !pt.t.Process.Match(name) {
				continue
			}
			key, ok, err := s.attachProcess(pt, p, exe)
			if ok {
				seen[key] = true
			}
			if err != nil && log != nil {
				log.Warn("function_process_failed", "source", pt.t.Describe(), "pos", pt.t.Declared, "pid", p.PID, "exe", exe, "error", err)
			}
		}
	}
	for k, f := range s.files {
		if seen[k] {
			f.missed = 0
			continue
		}
		if f.missed++; f.missed < source.ReleaseScans {
			continue
		}
		for _, l := range f.links {
			l.Close()
		}
		delete(s.files, k)
		if log != nil && len(f.traced) > 0 {
			log.Info("function_process_released", "binary", f.traced[0].Binary, "reason", "no matching process runs it")
		}
	}
}

// attachProcess attaches target pt to the file process p runs, unless
// it is attached already. It returns the file's key, with ok true, when
// the file was looked at (attached, or remembered as having no
// traceable function). s.mu is held.
func (s *Source) attachProcess(pt procTarget, p source.Process, exe string) (key fileKey, ok bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), scanTimeout)
	defer cancel()
	path := filepath.Join(p.Dir, "exe")
	on := userfile.OnPID(s.core.ProcRoot, p.PID)
	keyOf := func(i userfile.Info) fileKey {
		return fileKey{target: pt.index, dev: i.Dev, ino: i.Ino, mtime: i.ModTime.UnixNano(), size: i.Size}
	}
	info, err := userfile.StatPath(ctx, path, on)
	if errors.Is(err, userfile.ErrNotRegular) {
		return fileKey{}, false, nil
	}
	if err != nil {
		return fileKey{}, false, err
	}
	if key = keyOf(info); s.files[key] != nil {
		return key, true, nil
	}
	fh, err := userfile.OpenPath(ctx, path, userfile.Options{On: on})
	if errors.Is(err, userfile.ErrNotRegular) {
		return fileKey{}, false, nil
	}
	if err != nil {
		return fileKey{}, false, err
	}
	defer fh.Close()
	if key = keyOf(fh.Info); s.files[key] != nil {
		return key, true, nil
	}
	t := pt.t
	place := processPlace(ctx, s.core.ProcRoot, p.PID, exe)
	b, err := userfile.Do(ctx, on, func() (*Binary, error) { return ParseBinary(fh, funcs.Options{Filter: t.Functions}, place) }, (*Binary).Close)
	if errors.Is(err, userfile.ErrTimeout) || errors.Is(err, userfile.ErrBusy) {
		// Not remembered: tried again at the next scan.
		return key, true, fmt.Errorf("functions of %s: %w", exe, err)
	}
	pf := &procFile{}
	s.files[key] = pf
	if err != nil {
		return key, true, fmt.Errorf("functions of %s: %w", exe, err)
	}
	defer b.Close()
	pf.links, pf.traced, err = s.attachFile(pt.index, t, fh, b, exe, p.PID)
	if err != nil {
		// Remembered with nothing attached: a file refused (an old Go,
		// a label its ABI has not) is refused again at every scan.
		for _, l := range pf.links {
			l.Close()
		}
		pf.links, pf.traced = nil, nil
		return key, true, err
	}
	log := s.core.Logger
	if len(pf.traced) == 0 {
		if log != nil {
			log.Warn("function_process_untraced", "source", t.Describe(), "pos", t.Declared, "pid", p.PID, "exe", exe,
				"reason", fmt.Sprintf("no traceable function matches %q (spanwatch functions /proc/%d/exe lists them)", t.Functions, p.PID))
		}
		return key, true, nil
	}
	if log != nil {
		log.Info("function_process_attached", "source", t.Describe(), "pid", p.PID, "exe", exe, "functions", len(pf.traced), "uprobes", len(pf.links))
	}
	return key, true, nil
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

// Traced returns the attached functions: the binary: targets' in the
// order of the configuration, then the process: targets', by file.
func (s *Source) Traced() []Traced {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]Traced(nil), s.traced...)
	var more []Traced
	for _, f := range s.files {
		more = append(more, f.traced...)
	}
	sort.SliceStable(more, func(i, j int) bool {
		a, b := more[i], more[j]
		if a.Binary != b.Binary {
			return a.Binary < b.Binary
		}
		return a.Func.Entry < b.Func.Entry
	})
	return append(out, more...)
}

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
	if s.cancel != nil {
		s.cancel()
		s.wg.Wait()
		s.cancel = nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.stopCounts != nil {
		s.stopCounts()
		s.stopCounts = nil
	}
	var errs []error
	for _, l := range s.links {
		errs = append(errs, l.Close())
	}
	s.links = nil
	for k, f := range s.files {
		for _, l := range f.links {
			errs = append(errs, l.Close())
		}
		delete(s.files, k)
	}
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
