//go:build linux

package tracepoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/eventheader"
	"github.com/spanwatch/spanwatch/internal/kernel"
	"github.com/spanwatch/spanwatch/internal/perftp"
	"github.com/spanwatch/spanwatch/internal/srcspec"
	"github.com/spanwatch/spanwatch/internal/tpsource"
	"github.com/spanwatch/spanwatch/internal/tracefs"
	"github.com/spanwatch/spanwatch/source"
	"github.com/spanwatch/spanwatch/userevents"
)

// A Source is the span sources on user_events tracepoints of a rule
// file (internal/tpsource), attached to a collector's aggregation core:
// generic user_events, cast by the field offsets of their format files,
// and EventHeader tracepoints. Events that appear later are picked up.
// Close releases them before the collector.
type Source struct {
	cfg  Config
	log  *slog.Logger
	dir  string
	core *source.Core

	labelSets  []uint16 // allocated for sources with labels
	stopCounts func()   // stops snapshots reading Counts

	ue    *ueObjects
	eh    *ehObjects
	links []link.Link
	perf  *perftp.Set

	mu       sync.Mutex
	sources  []*tpSourceState
	seen     map[tracefs.Event]bool   // events looked at (bound, or of no use to any source)
	bindErrs map[tracefs.Event]string // the last error binding each event that failed
	bound    map[uint32]tracefs.Event

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

type tpSourceState struct {
	src        tpsource.Source
	labelSet   uint16            // 0: no labels
	ehMappings []uint32          // indexes in eh_mappings
	attached   []string          // tracepoints the source reads
	problems   map[string]string // by tracepoint: why it could not be read
	warned     bool              // reported as missing
}

// Attach loads the BPF objects the sources need beside the collector's
// core (sharing its maps), attaches them to perf_tp_event the way the
// core is attached (fentry, or a kprobe), and starts watching
// tracefs for the sources' events: those registered now are attached
// before it returns, later ones within DiscoverInterval. It needs
// user_events (kernel 6.4+) only for events to appear; bpf_loop (5.17+)
// for EventHeader sources.
func Attach(ctx context.Context, core *source.Core, srcs []tpsource.Source, cfg Config) (_ *Source, err error) {
	if err := bpf.CheckArch(); err != nil {
		return nil, fmt.Errorf("user_events and eventheader sources: %w", err)
	}
	if core.Kernel.Core == kernel.CoreCompat {
		// Their objects decode events with bpf_loop (5.17+) and feed the
		// full core; user_events themselves need 6.4+.
		return nil, fmt.Errorf("user_events and EventHeader sources: %w: this kernel runs the compat BPF objects (%s)", ebpf.ErrNotSupported, core.Kernel.Probes.CompatReason())
	}
	if cfg.DiscoverInterval <= 0 {
		cfg.DiscoverInterval = time.Second
	}
	if cfg.MissingAfter <= 0 {
		cfg.MissingAfter = 30 * time.Second
	}
	t := &Source{
		cfg:      cfg,
		core:     core,
		log:      core.Logger,
		seen:     map[tracefs.Event]bool{},
		bindErrs: map[tracefs.Event]string{},
		bound:    map[uint32]tracefs.Event{},
		stop:     make(chan struct{}),
	}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	if err := errors.Join(CheckTracepointSources(srcs)...); err != nil {
		return nil, fmt.Errorf("tracepoint sources: %w", err)
	}
	needUE, needEH := false, false
	labelValues := 0
	for i := range srcs {
		st := &tpSourceState{src: srcs[i], problems: map[string]string{}}
		if len(srcs[i].Labels.List) > 0 {
			if st.labelSet, err = core.AllocLabelSet(srcs[i].Labels.Names(), make([]bool, len(srcs[i].Labels.List))); err != nil {
				return nil, err
			}
			t.labelSets = append(t.labelSets, st.labelSet)
			labelValues += len(srcs[i].Labels.List) * srcs[i].Labels.CapOrDefault()
		}
		t.sources = append(t.sources, st)
		switch srcs[i].Kind {
		case tpsource.UserEvents:
			needUE = true
		case tpsource.EventHeader:
			needEH = true
		}
	}
	method := core.TracepointMethod
	if cfg.test {
		method = "test"
	}
	if needUE {
		if t.ue, err = loadUserEvents(core.Maps, method, labelValues); err != nil {
			return nil, err
		}
		if err := t.writeUESources(); err != nil {
			return nil, err
		}
	}
	if needEH {
		if t.eh, err = loadEventHeader(core.Maps, method, labelValues); err != nil {
			return nil, err
		}
		if err := t.writeEHMappings(); err != nil {
			return nil, err
		}
	}
	// Snapshots carry the sources' counts from now on.
	t.stopCounts = core.AddCounts(t.Counts)
	if cfg.test {
		t.dir = cfg.TracefsDir
		return t, nil
	}
	for _, p := range []*ebpf.Program{t.ue.program(), t.eh.program()} {
		if p == nil {
			continue
		}
		l, err := perftp.AttachProgram(method, p)
		if err != nil {
			return nil, err
		}
		t.links = append(t.links, l)
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	t.perf = perftp.New(core.Logger, ncpu)
	t.dir = cfg.TracefsDir
	if t.dir == "" {
		if t.dir, err = userevents.TracefsDir(); err != nil {
			return nil, fmt.Errorf("tracepoint sources: %w", err)
		}
	}
	t.discover()
	start := time.Now()
	for _, s := range t.sources {
		if len(s.attached) == 0 && len(s.problems) == 0 {
			t.log.Info("tracepoint_source_waiting", "source", s.src.Describe(), "pos", s.src.Pos)
		}
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		tick := time.NewTicker(cfg.DiscoverInterval)
		defer tick.Stop()
		cpus := time.NewTicker(perftp.CheckInterval)
		defer cpus.Stop()
		report := time.NewTicker(countsReportInterval)
		defer report.Stop()
		var reported map[string]uint64
		for {
			select {
			case <-t.stop:
				return
			case <-ctx.Done():
				return
			case <-report.C:
				reported = t.reportRefused(reported)
			case <-tick.C:
				t.discover()
				if time.Since(start) >= cfg.MissingAfter {
					t.reportMissing()
				}
			case <-cpus.C:
				t.perf.Check()
			}
		}
	}()
	return t, nil
}

// Kind is "tracepoints": user_events and EventHeader sources.
func (t *Source) Kind() string { return "tracepoints" }

// Close detaches the sources. It is idempotent.
func (t *Source) Close() error {
	t.once.Do(func() {
		close(t.stop)
		t.wg.Wait()
		for _, l := range t.links {
			l.Close()
		}
		if t.perf != nil {
			t.perf.Close()
		}
		t.ue.close()
		t.eh.close()
		for _, id := range t.labelSets {
			t.core.FreeLabelSet(id)
		}
		if t.stopCounts != nil {
			t.stopCounts()
		}
	})
	return nil
}

// Status reports each source: the tracepoints it reads and what kept
// others from being read.
func (t *Source) Status() []Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Status, len(t.sources))
	for i, s := range t.sources {
		out[i] = Status{Source: s.src.Describe(), Pos: s.src.Pos.String(), Tracepoints: slices.Clone(s.attached), Problems: map[string]string{}}
		for k, v := range s.problems {
			out[i].Problems[k] = v
		}
	}
	return out
}

// Counts returns how the events of the sources ended, summed over CPUs:
// "user_events/REASON" and "eventheader/REASON", REASON as
// eventheader.Reason names it ("ok", "bad_time", ...) and the user_events
// reasons ("ok", "short", "bad_loc", "unpaired", "read_error",
// "inflight_full"), and label values keyed "other" (".../label_other":
// past the cap; "label_full"; "label_unread"). Names cut to fit are
// counted by the core
// (snapshot.Stats.NamesTruncated). Only nonzero counts are returned.
func (t *Source) Counts() (map[string]uint64, error) {
	out := map[string]uint64{}
	if t.ue != nil {
		if err := sumCounters(t.ue.counters, func(i uint32, v uint64) {
			out["user_events/"+ueReasonNames[i]] += v
		}); err != nil {
			return nil, err
		}
	}
	for _, o := range []struct {
		kind string
		m    *ebpf.Map
	}{{"user_events", t.ue.srcCounters()}, {"eventheader", t.eh.srcCounters()}} {
		if o.m == nil {
			continue
		}
		if err := sumCounters(o.m, func(i uint32, v uint64) {
			out[o.kind+"/"+srcCounterNames[i]] += v
		}); err != nil {
			return nil, err
		}
	}
	if t.eh != nil {
		if err := sumCounters(t.eh.counters, func(i uint32, v uint64) {
			var name string
			switch {
			case i < uint32(bpf.EventheaderEhReasonEH_NUM_REASONS):
				name = eventheader.Reason(i).String()
			case i == uint32(bpf.EventheaderEhCountEH_COUNT_READ_ERRORS):
				name = "read_error"
			case i == uint32(bpf.EventheaderEhCountEH_COUNT_INFLIGHT_FULL):
				name = "inflight_full"
			default:
				name = fmt.Sprintf("counter%d", i)
			}
			out["eventheader/"+name] += v
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// CPUGaps reports how many times a CPU was found without live perf events
// on the sources' tracepoints (as Collector.UserEventsCPUGaps does for the span event).
func (t *Source) CPUGaps() uint64 {
	if t.perf == nil {
		return 0
	}
	return t.perf.Stats().Gaps
}

// srcCounterNames name bpf/source.h's src_counters (enum src_counter):
// label values keyed "other". Index 3 is a spare below SRC_COUNTER_MAX.
var srcCounterNames = map[uint32]string{
	uint32(bpf.UsdtSrcCounterSRC_COUNTER_LABEL_OTHER): "label_other", uint32(bpf.UsdtSrcCounterSRC_COUNTER_LABEL_FULL): "label_full",
	uint32(bpf.UsdtSrcCounterSRC_COUNTER_LABEL_UNREAD): "label_unread", 3: "src_counter3",
}

var ueReasonNames = map[uint32]string{
	uint32(bpf.UsereventsUeReasonUE_OK): "ok", uint32(bpf.UsereventsUeReasonUE_SHORT): "short",
	uint32(bpf.UsereventsUeReasonUE_BAD_LOC): "bad_loc", uint32(bpf.UsereventsUeReasonUE_UNPAIRED): "unpaired_end",
	uint32(bpf.UsereventsUeReasonUE_READ_ERROR): "read_error", uint32(bpf.UsereventsUeReasonUE_INFLIGHT_FULL): "inflight_full",
}

func sumCounters(m *ebpf.Map, f func(i uint32, v uint64)) error {
	var vals []uint64
	for i := uint32(0); i < m.MaxEntries(); i++ {
		if err := m.Lookup(i, &vals); err != nil {
			return fmt.Errorf("read %s: %w", m, err)
		}
		var sum uint64
		for _, v := range vals {
			sum += v
		}
		if sum != 0 {
			f(i, sum)
		}
	}
	return nil
}

// countsReportInterval is how often events refused since the last report
// are logged.
var countsReportInterval = 30 * time.Second

// reportRefused logs the events refused since the last report (prev), by
// reason, and returns the counts now.
func (t *Source) reportRefused(prev map[string]uint64) map[string]uint64 {
	cur, err := t.Counts()
	if err != nil {
		t.log.Warn("tracepoint_counts_unreadable", "error", err)
		return prev
	}
	var args []any
	for k, v := range cur {
		if strings.HasSuffix(k, "/ok") || v == prev[k] {
			continue
		}
		args = append(args, strings.ReplaceAll(k, "/", "_"), v-prev[k])
	}
	if len(args) > 0 {
		t.log.Warn("tracepoint_events_refused", args...)
	}
	return cur
}

// reportMissing warns once about each source none of whose events
// appeared.
func (t *Source) reportMissing() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.sources {
		if len(s.attached) == 0 && !s.warned {
			s.warned = true
			t.log.Warn("tracepoint_source_missing", "source", s.src.Describe(), "pos", s.src.Pos,
				"waited", t.cfg.MissingAfter, "problems", len(s.problems),
				"hint", "no process has registered the events yet (see "+t.dir+"/events/user_events); spanwatch keeps watching")
		}
	}
}

// discover binds the events registered since the last look.
func (t *Source) discover() {
	evs, err := tracefs.UserEvents(t.dir)
	if err != nil {
		t.log.Warn("tracepoint_list_failed", "error", err)
		return
	}
	for _, ev := range evs {
		t.mu.Lock()
		done := t.seen[ev]
		t.mu.Unlock()
		if done || !t.wanted(ev) {
			continue
		}
		f, err := tracefs.ReadFormat(t.dir, ev)
		if err != nil {
			// Deleted between the listing and the read, or a format we
			// cannot parse: look again next time.
			t.log.Debug("tracepoint_format_unreadable", "tracepoint", ev.String(), "error", err)
			continue
		}
		if err := t.Bind(ev, f); err != nil {
			// Tried again at the next look (a map or perf event the
			// kernel could not give now); logged when the error changes.
			t.mu.Lock()
			if t.bindErrs[ev] != err.Error() {
				t.bindErrs[ev] = err.Error()
				t.log.Warn("tracepoint_bind_failed", "tracepoint", ev.String(), "error", err, "effect", "tried again every discovery interval")
			}
			t.mu.Unlock()
			continue
		}
		t.mu.Lock()
		t.seen[ev] = true
		delete(t.bindErrs, ev)
		t.mu.Unlock()
	}
}

// wanted reports whether any source could use ev.
func (t *Source) wanted(ev tracefs.Event) bool {
	base := ev.BaseName()
	tp, isEH := eventheader.ParseTracepoint(base)
	for _, s := range t.sources {
		switch s.src.Kind {
		case tpsource.UserEvents:
			if slices.Contains(s.src.Events(), base) {
				return true
			}
		case tpsource.EventHeader:
			if isEH && ehSelects(&s.src, tp) {
				return true
			}
		}
	}
	return false
}

// ehSelects reports whether an EventHeader source takes tracepoint tp.
func ehSelects(s *tpsource.Source, tp eventheader.Tracepoint) bool {
	return tp.Provider == s.Provider && (s.Level == 0 || tp.Level <= s.Level) && (s.Keyword == 0 || tp.Keyword&s.Keyword != 0)
}

// Bind attaches the sources that use tracepoint ev, whose format is f:
// what each needs from its fields is written for the BPF programs, and a
// perf event is opened on it on every online CPU. Problems of a source
// (a field it names that the event lacks) are logged and kept in Status;
// the other sources still bind.
func (t *Source) Bind(ev tracefs.Event, f *tracefs.Format) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, dup := t.bound[f.ID]; dup {
		return nil
	}
	var users []*tpSourceState
	var err error
	tp, isEH := eventheader.ParseTracepoint(ev.BaseName())
	if isEH {
		users, err = t.bindEH(ev, f, tp)
	} else {
		users, err = t.bindUE(ev, f)
	}
	if err != nil || len(users) == 0 {
		return err
	}
	if t.perf != nil {
		if err := t.perf.Add(f.ID, ev.String()); err != nil {
			return err
		}
	}
	t.bound[f.ID] = ev
	for _, s := range users {
		s.attached = append(s.attached, ev.String())
		t.log.Info("tracepoint_source_attached", "source", s.src.Describe(), "tracepoint", ev.String(), "id", f.ID)
	}
	return nil
}

// problem records why a source cannot read a tracepoint, once.
func (t *Source) problem(s *tpSourceState, ev tracefs.Event, msg string) {
	if _, dup := s.problems[ev.String()]; dup {
		return
	}
	s.problems[ev.String()] = msg
	t.log.Warn("tracepoint_source_problem", "source", s.src.Describe(), "pos", s.src.Pos, "tracepoint", ev.String(), "problem", msg)
}

// --- EventHeader ---

// Constants of bpf/eventheader.bpf.c, generated from its enums.
const (
	// ehNoField marks a value no field gives (EH_NO_FIELD, SRC_NO_ARG).
	ehNoField = uint8(bpf.EventheaderSrcIndexSRC_NO_ARG)
	// Mapping kinds, enum eh_kind.
	ehKindSpan   = uint32(bpf.EventheaderEhKindEH_KIND_SPAN)
	ehKindFields = uint32(bpf.EventheaderEhKindEH_KIND_FIELDS)
)

// writeEHMappings writes the event mappings of the EventHeader sources:
// one for a source of Span events or of one event, two (start, end) for
// a pair.
func (t *Source) writeEHMappings() error {
	next := uint32(0)
	for i, s := range t.sources {
		if s.src.Kind != tpsource.EventHeader {
			continue
		}
		var ms []bpf.EventheaderEhMapping
		if s.src.SpanEvents() {
			m := bpf.EventheaderEhMapping{Event: eventheader.NameHash(eventheader.SpanEvent), Kind: ehKindSpan}
			wants := eventheader.SpanWants()
			m.Nwant = uint32(len(wants))
			copy(m.Want[:], wants)
			ms = append(ms, m)
		} else if s.src.Paired() {
			ms = append(ms, ehFieldsMapping(&s.src, s.src.Start, tpRoleStart, uint32(i), s.labelSet),
				ehFieldsMapping(&s.src, s.src.End, tpRoleEnd, uint32(i), s.labelSet))
		} else if s.src.IsMetric() {
			ms = append(ms, ehFieldsMapping(&s.src, s.src.Event, tpRoleMetric, uint32(i), s.labelSet))
		} else {
			ms = append(ms, ehFieldsMapping(&s.src, s.src.Event, tpRoleSingle, uint32(i), s.labelSet))
		}
		for k := range ms {
			if err := t.eh.mappings.Put(next, &ms[k]); err != nil {
				return fmt.Errorf("write eventheader mapping: %w", err)
			}
			s.ehMappings = append(s.ehMappings, next)
			next++
		}
	}
	return nil
}

// Roles: enum tp_role in bpf/tpspan.h, generated.
const (
	tpRoleSingle = uint32(bpf.EventheaderTpRoleTP_SINGLE)
	tpRoleStart  = uint32(bpf.EventheaderTpRoleTP_START)
	tpRoleEnd    = uint32(bpf.EventheaderTpRoleTP_END)
	tpRoleMetric = uint32(bpf.EventheaderTpRoleTP_METRIC)
)

// ueBufSize is how much of a user_events record the program reads
// (UE_BUF_SIZE in bpf/userevents.bpf.c).
const ueBufSize = int(bpf.UsereventsUeSizesUE_BUF_SIZE)

// ehFieldsMapping maps the fields of event name for one role of s: the
// name (a pair reads it at the start), the duration (a single event), the
// key (a pair by key) and the status (a single or end event).
func ehFieldsMapping(s *tpsource.Source, event string, role uint32, source uint32, labelSet uint16) bpf.EventheaderEhMapping {
	m := bpf.EventheaderEhMapping{Event: eventheader.NameHash(event), Kind: ehKindFields, Role: role, Source: source,
		IdxName: ehNoField, IdxDuration: ehNoField, IdxKey: ehNoField, IdxStatus: ehNoField}
	name := s.Span
	if role == tpRoleMetric {
		name = s.Metric
	}
	for k := 0; k < len(name) && k < len(m.Name)-1; k++ {
		m.Name[k] = int8(name[k])
	}
	want := func(f tpsource.Field) uint8 {
		m.Want[m.Nwant] = eventheader.Path(f...)
		m.Nwant++
		return uint8(m.Nwant - 1)
	}
	if !s.NameField.IsZero() && role != tpRoleEnd {
		m.IdxName = want(s.NameField)
	}
	if !s.DurationField.IsZero() && role == tpRoleSingle {
		m.IdxDuration = want(s.DurationField)
	}
	if role == tpRoleMetric {
		m.IdxDuration = want(s.ValueField)
	}
	if !s.KeyField.IsZero() && role != tpRoleSingle {
		m.IdxKey = want(s.KeyField)
	}
	if !s.StatusField.IsZero() && role != tpRoleStart {
		m.IdxStatus = want(s.StatusField)
	}
	if role != tpRoleStart {
		// The predicate and the labels read the single, end or metric
		// event's fields.
		for _, f := range s.Operands {
			m.IdxOps[m.Nops] = want(f)
			m.Nops++
		}
		mp := tpMap(s, labelSet)
		m.Map = *(*bpf.EventheaderTpMap)(unsafe.Pointer(&mp))
	}
	return m
}

// tpMapLayout is struct tp_map (bpf/tpspan.h), built from srcspec's
// mirrors of bpf/source.h; the two objects' bpf2go mirrors have the same
// layout (init checks the sizes; srcspec's tests check its mirrors field
// by field).
type tpMapLayout struct {
	Pred    srcspec.Pred
	Labels  srcspec.LabelSpec
	HasPred uint32
	_       uint32
	_       [4]byte
}

func init() {
	if unsafe.Sizeof(tpMapLayout{}) != unsafe.Sizeof(bpf.UsereventsTpMap{}) || unsafe.Sizeof(tpMapLayout{}) != unsafe.Sizeof(bpf.EventheaderTpMap{}) {
		panic("collector: struct tp_map mirrors differ: regenerate bpf")
	}
}

// tpMap encodes a source's error predicate and labels.
func tpMap(s *tpsource.Source, labelSet uint16) tpMapLayout {
	var m tpMapLayout
	if s.Error != nil {
		m.Pred = s.Error.Encode()
		m.HasPred = 1
	}
	m.Labels = s.Labels.Encode(labelSet)
	return m
}

func (t *Source) bindEH(ev tracefs.Event, f *tracefs.Format, tp eventheader.Tracepoint) ([]*tpSourceState, error) {
	var users []*tpSourceState
	var tpv bpf.EventheaderEhTracepoint
	names, types, offs := make([]string, len(f.Fields)), make([]string, len(f.Fields)), make([]int, len(f.Fields))
	for k, fl := range f.Fields {
		names[k], types[k], offs[k] = fl.Name, fl.Type, fl.Offset
	}
	formatErr := eventheader.CheckFormat(names, types, offs)
	for _, s := range t.sources {
		if s.src.Kind != tpsource.EventHeader || !ehSelects(&s.src, tp) {
			continue
		}
		if formatErr != nil {
			t.problem(s, ev, "not an EventHeader tracepoint: "+formatErr.Error())
			continue
		}
		if int(tpv.N)+len(s.ehMappings) > len(tpv.Mapping) {
			t.problem(s, ev, fmt.Sprintf("more than %d event mappings on this tracepoint", len(tpv.Mapping)))
			continue
		}
		for _, m := range s.ehMappings {
			tpv.Mapping[tpv.N] = m
			tpv.N++
		}
		users = append(users, s)
	}
	if len(users) == 0 {
		return nil, nil
	}
	if err := t.eh.tracepoints.Put(f.ID, &tpv); err != nil {
		return nil, fmt.Errorf("watch eventheader tracepoint %s (id %d): %w", ev, f.ID, err)
	}
	return users, nil
}

// --- user_events ---

func (t *Source) writeUESources() error {
	for i, s := range t.sources {
		if s.src.Kind != tpsource.UserEvents {
			continue
		}
		var v bpf.UsereventsUeSource
		name := s.src.Span
		if s.src.IsMetric() {
			name = s.src.Metric
		}
		for k := 0; k < len(name) && k < len(v.Name)-1; k++ {
			v.Name[k] = int8(name[k])
		}
		mp := tpMap(&s.src, s.labelSet)
		v.Map = *(*bpf.UsereventsTpMap)(unsafe.Pointer(&mp))
		if err := t.ue.sources.Put(uint32(i), &v); err != nil {
			return fmt.Errorf("write user_events source: %w", err)
		}
	}
	return nil
}

func (t *Source) bindUE(ev tracefs.Event, f *tracefs.Format) ([]*tpSourceState, error) {
	var users []*tpSourceState
	var e bpf.UsereventsUeEvent
	base := ev.BaseName()
	for i, s := range t.sources {
		if s.src.Kind != tpsource.UserEvents {
			continue
		}
		for _, role := range ueRoles(&s.src, base) {
			r, err := compileUERole(&s.src, f, role)
			if err != nil {
				t.problem(s, ev, err.Error())
				continue
			}
			if int(e.N) == len(e.Roles) {
				t.problem(s, ev, fmt.Sprintf("more than %d sources use this event", len(e.Roles)))
				continue
			}
			r.Source = uint32(i)
			e.Roles[e.N] = r
			e.N++
			if !slices.Contains(users, s) {
				users = append(users, s)
			}
		}
	}
	if len(users) == 0 {
		return nil, nil
	}
	if err := t.ue.events.Put(f.ID, &e); err != nil {
		return nil, fmt.Errorf("watch user_event %s (id %d): %w", ev, f.ID, err)
	}
	return users, nil
}

// ueRoles returns the roles the event called base plays in a source.
func ueRoles(s *tpsource.Source, base string) []bpf.UsereventsUeRoleKind {
	var out []bpf.UsereventsUeRoleKind
	switch {
	case s.Event == base && s.IsMetric():
		out = append(out, bpf.UsereventsUeRoleKindUE_METRIC)
	case s.Event == base:
		out = append(out, bpf.UsereventsUeRoleKindUE_SINGLE)
	case s.Start == base:
		out = append(out, bpf.UsereventsUeRoleKindUE_START)
	case s.End == base:
		out = append(out, bpf.UsereventsUeRoleKindUE_END)
	}
	return out
}

// compileUERole resolves a source's fields in an event's format.
func compileUERole(s *tpsource.Source, f *tracefs.Format, role bpf.UsereventsUeRoleKind) (bpf.UsereventsUeRole, error) {
	r := bpf.UsereventsUeRole{Role: uint32(role)}
	var errs []error
	field := func(ref tpsource.Field, what string, str bool, required bool) bpf.UsereventsUeField {
		if ref.IsZero() {
			return bpf.UsereventsUeField{}
		}
		fl := f.Field(ref[0])
		if fl == nil {
			if required {
				msg := fmt.Sprintf("%s %s: event %s has no field %s (it has: %s)", what, ref, f.Name, ref, strings.Join(f.FieldNames(), ", "))
				if near := tracefs.Nearest(ref[0], f.FieldNames()); near != "" {
					msg += "; did you mean " + near + "?"
				}
				errs = append(errs, errors.New(msg))
			}
			return bpf.UsereventsUeField{}
		}
		out := bpf.UsereventsUeField{Off: uint16(fl.Offset), Size: uint16(fl.Size)}
		switch {
		case str && fl.IsString():
			out.Kind = map[tracefs.FieldKind]uint8{
				tracefs.KindChars:   uint8(bpf.UsereventsUeKindUE_CHARS),
				tracefs.KindDataLoc: uint8(bpf.UsereventsUeKindUE_DATA_LOC),
				tracefs.KindRelLoc:  uint8(bpf.UsereventsUeKindUE_REL_LOC),
			}[fl.Kind]
		case !str && fl.Kind == tracefs.KindInt:
			out.Kind = uint8(bpf.UsereventsUeKindUE_INT)
			if fl.Signed {
				out.IsSigned = 1
			}
		default:
			want := "an integer (u8..u64, s8..s64)"
			if str {
				want = "a string (char[N], __data_loc char[] or __rel_loc char[])"
			}
			errs = append(errs, fmt.Errorf("%s %s: field %s of event %s is %s, want %s", what, ref, fl.Name, f.Name, fl.Type, want))
			return bpf.UsereventsUeField{}
		}
		if fl.Offset+fl.Size > ueBufSize {
			errs = append(errs, fmt.Errorf("%s %s: field %s of event %s ends at byte %d, past the %d the program reads", what, ref, fl.Name, f.Name, fl.Offset+fl.Size, ueBufSize))
		}
		return out
	}
	switch role {
	case bpf.UsereventsUeRoleKindUE_METRIC:
		r.Duration = field(s.ValueField, "value_field", false, true)
		r.Status = field(s.StatusField, "status_field", false, true)
	case bpf.UsereventsUeRoleKindUE_SINGLE:
		r.Name = field(s.NameField, "name_field", true, true)
		r.Duration = field(s.DurationField, "duration_field", false, true)
		r.Status = field(s.StatusField, "status_field", false, true)
	case bpf.UsereventsUeRoleKindUE_START:
		// The start reads the name when it has the field; else the end
		// must.
		r.Name = field(s.NameField, "name_field", true, false)
		r.Key = field(s.KeyField, "key_field", false, true)
	case bpf.UsereventsUeRoleKindUE_END:
		r.Name = field(s.NameField, "name_field", true, false)
		r.Key = field(s.KeyField, "key_field", false, true)
		r.Status = field(s.StatusField, "status_field", false, true)
	}
	if role != bpf.UsereventsUeRoleKindUE_START {
		for i, f := range s.Operands {
			if i < len(r.Ops) {
				r.Ops[i] = field(f, "error/labels operand", false, true)
				r.Nops++
			}
		}
	}
	return r, errors.Join(errs...)
}
