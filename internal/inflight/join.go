package inflight

import (
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

// A Record is one overrun record as the collector decoded it, with what
// the Joiner needs to tell which span it belongs to.
type Record struct {
	Overrun snapshot.Overrun
	// Sample says the in-flight sampler took it while the span ran past
	// its budget (StatusStillRunning); OffCPU, that the thread was off
	// the CPU (StatusOffCPU).
	Sample, OffCPU bool
	// StartNs is the span's start as its source reported it
	// (CLOCK_REALTIME, the SDKs' span events), 0 when unknown (USDT).
	StartNs uint64
	// MonoStartNs is the span's start on CLOCK_MONOTONIC: the record's
	// time less its duration.
	MonoStartNs uint64
}

// JoinConfig configures a Joiner. The zero value works.
type JoinConfig struct {
	// MaxGap bounds the span time one sample stands for: the samplers
	// take a running span's stack at least every 1/Frequency of CPU time
	// and a blocked one's every scan Interval, so a longer gap is time
	// not sampled (the span's samples ran out). 250ms when zero.
	MaxGap time.Duration
	// Tolerance is how far apart the starts of a sample and an end may
	// be when the source gives no exact start (USDT spans): the end's
	// start is its record's time less its duration, a few microseconds
	// after the real start. 2ms when zero.
	Tolerance time.Duration
	// Retain is how long a span's samples wait for its end after its
	// last sample; a span that ends later gets none. 10 minutes when
	// zero.
	Retain time.Duration
	// EarlyGrace is how long past its budget the Joiner waits for a span
	// sampled from its start (SetEarly), whose samples are all from
	// within its budget, to show it runs over (a sample past the budget
	// or its end): a span that does neither ended within its budget, and
	// its samples are dropped (EarlyDropped). 250ms when zero.
	EarlyGrace time.Duration
	// MaxSpans bounds the spans waiting for their end (4096 when zero),
	// MaxSamples the samples kept of one span (1024 when zero); what
	// goes past them is counted in Dropped.
	MaxSpans, MaxSamples int
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// A Joiner turns the in-flight sampler's records and the overruns of the
// spans they were taken in into one report per span. The first sample of
// a span is reported at once as an overrun with StillRunning set (the
// span is still running past its budget: it may never end); later samples
// are kept, and when the span ends its overrun carries them all as
// snapshot.Sample, merged by stack, each weighed by the span time it
// stands for. It is safe for concurrent use.
type Joiner struct {
	cfg JoinConfig

	mu      sync.Mutex
	groups  map[groupKey][]*pending
	spans   int
	dropped uint64
	swept   time.Time
	// ended remembers the spans that ended lately, so that a sample that
	// follows its span's end (taken before the samplers learnt of it) is
	// not reported as a span still running.
	ended []endedSpan
	endAt int
	// early counts the pending spans with only samples from within their
	// budget; nextDecide is the soonest decideBy among them.
	early        int
	nextDecide   time.Time
	earlyDropped uint64
}

type endedSpan struct {
	gk        groupKey
	tid       uint32
	startNs   uint64
	monoStart uint64
}

// endedKept is how many ended spans the Joiner remembers.
const endedKept = 256

// groupKey gathers the pending spans an end record may belong to.
type groupKey struct {
	pid    uint32
	nameID uint64
}

type pending struct {
	tid       uint32 // thread of the first sample (spans without StartNs are paired by thread)
	startNs   uint64
	monoStart uint64
	last      time.Time
	samples   []rawSample
	// early: every sample so far was taken within the span's budget
	// (sampled from its start): not reported yet, and dropped at
	// decideBy unless the span shows it runs over.
	early    bool
	decideBy time.Time
}

type rawSample struct {
	elapsedNs uint64
	offCPU    bool
	user      []snapshot.Frame
	kernel    []snapshot.Frame
}

// NewJoiner returns a Joiner for cfg.
func NewJoiner(cfg JoinConfig) *Joiner {
	if cfg.MaxGap == 0 {
		cfg.MaxGap = 250 * time.Millisecond
	}
	if cfg.Tolerance == 0 {
		cfg.Tolerance = 2 * time.Millisecond
	}
	if cfg.Retain == 0 {
		cfg.Retain = 10 * time.Minute
	}
	if cfg.EarlyGrace == 0 {
		cfg.EarlyGrace = 250 * time.Millisecond
	}
	if cfg.MaxSpans == 0 {
		cfg.MaxSpans = 4096
	}
	if cfg.MaxSamples == 0 {
		cfg.MaxSamples = 1024
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Joiner{cfg: cfg, groups: map[groupKey][]*pending{}}
}

// Add takes one record and returns the overrun to report, if any: an end
// (with the span's samples attached), or a span's first sample.
func (j *Joiner) Add(r Record) (snapshot.Overrun, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	now := j.cfg.Now()
	if now.Sub(j.swept) > j.cfg.Retain/10 {
		j.sweep(now)
	}
	j.settle(now)
	o := r.Overrun
	// A span whose source gives its start (the SDKs) is matched by it:
	// its name may have grown by its end (a name completed when it ends).
	gk := groupKey{o.PID, o.NameID}
	if r.StartNs != 0 {
		gk.nameID = 0
	}
	i := j.find(gk, r)
	if !r.Sample {
		j.remember(endedSpan{gk, o.TID, r.StartNs, r.MonoStartNs})
		if i < 0 {
			return o, true
		}
		p := j.groups[gk][i]
		j.remove(gk, i)
		o.Samples = j.merge(p.samples, o.DurationNs)
		return o, true
	}
	s := rawSample{elapsedNs: o.DurationNs, offCPU: r.OffCPU, user: o.UserStack, kernel: o.KernelStack}
	// A sample from within the budget: the span was sampled from its
	// start, and is no overrun (yet).
	within := o.BudgetNs != 0 && o.DurationNs <= o.BudgetNs
	if i >= 0 {
		p := j.groups[gk][i]
		p.last = now
		if len(p.samples) >= j.cfg.MaxSamples {
			j.dropped++
		} else {
			p.samples = append(p.samples, s)
		}
		if p.early && !within {
			// Over its budget now: reported as today's first sample.
			p.early = false
			j.early--
			return o, true
		}
		if p.early {
			j.decideAt(p, now, o)
		}
		return snapshot.Overrun{}, false
	}
	if j.endedAlready(gk, r) {
		j.dropped++
		return snapshot.Overrun{}, false
	}
	if j.spans >= j.cfg.MaxSpans {
		// Report it still, without keeping its samples; one from within
		// its budget is no overrun.
		j.dropped++
		return o, !within
	}
	p := &pending{tid: o.TID, startNs: r.StartNs, monoStart: r.MonoStartNs, last: now, samples: []rawSample{s}}
	j.groups[gk] = append(j.groups[gk], p)
	j.spans++
	if within {
		p.early = true
		j.early++
		j.decideAt(p, now, o)
		return snapshot.Overrun{}, false
	}
	return o, true
}

// decideAt sets when the early span p, sampled now at o's time into it,
// is dropped unless it shows it runs over: EarlyGrace past its budget.
func (j *Joiner) decideAt(p *pending, now time.Time, o snapshot.Overrun) {
	p.decideBy = now.Add(time.Duration(o.BudgetNs-o.DurationNs) + j.cfg.EarlyGrace)
	if j.early == 1 || p.decideBy.Before(j.nextDecide) {
		j.nextDecide = p.decideBy
	}
}

// settle drops the spans sampled from their start that did not show, by
// their decideBy, that they run over their budgets: they ended within
// them.
func (j *Joiner) settle(now time.Time) {
	if j.early == 0 || now.Before(j.nextDecide) {
		return
	}
	var next time.Time
	for gk, g := range j.groups {
		for i := 0; i < len(g); {
			p := g[i]
			if !p.early {
				i++
				continue
			}
			if now.Before(p.decideBy) {
				if next.IsZero() || p.decideBy.Before(next) {
					next = p.decideBy
				}
				i++
				continue
			}
			j.earlyDropped += uint64(len(p.samples))
			j.early--
			g[i] = g[len(g)-1]
			g = g[:len(g)-1]
			j.spans--
		}
		if len(g) == 0 {
			delete(j.groups, gk)
		} else {
			j.groups[gk] = g
		}
	}
	j.nextDecide = next
}

// find returns the index of r's span among gk's pending spans, or -1.
func (j *Joiner) find(gk groupKey, r Record) int {
	// Samples carry their span's exact start; an end's is estimated.
	best, bestD := -1, uint64(j.cfg.Tolerance)
	if r.Sample {
		bestD = 0
	}
	for i, p := range j.groups[gk] {
		if r.StartNs != 0 && p.startNs != 0 {
			if r.StartNs == p.startNs {
				return i
			}
			continue
		}
		if p.tid != r.Overrun.TID {
			continue
		}
		d := p.monoStart - r.MonoStartNs
		if r.MonoStartNs > p.monoStart {
			d = r.MonoStartNs - p.monoStart
		}
		if d <= bestD {
			best, bestD = i, d
		}
	}
	return best
}

func (j *Joiner) remember(e endedSpan) {
	if len(j.ended) < endedKept {
		j.ended = append(j.ended, e)
		return
	}
	j.ended[j.endAt] = e
	j.endAt = (j.endAt + 1) % endedKept
}

// endedAlready reports whether sample r belongs to a span that ended.
func (j *Joiner) endedAlready(gk groupKey, r Record) bool {
	for _, e := range j.ended {
		if e.gk != gk {
			continue
		}
		if r.StartNs != 0 && e.startNs != 0 {
			if r.StartNs == e.startNs {
				return true
			}
			continue
		}
		d := e.monoStart - r.MonoStartNs
		if r.MonoStartNs > e.monoStart {
			d = r.MonoStartNs - e.monoStart
		}
		if e.tid == r.Overrun.TID && d <= uint64(j.cfg.Tolerance) {
			return true
		}
	}
	return false
}

func (j *Joiner) remove(gk groupKey, i int) {
	g := j.groups[gk]
	if g[i].early {
		j.early--
	}
	g[i] = g[len(g)-1]
	g = g[:len(g)-1]
	if len(g) == 0 {
		delete(j.groups, gk)
	} else {
		j.groups[gk] = g
	}
	j.spans--
}

// sweep forgets spans whose samples have waited longer than Retain.
func (j *Joiner) sweep(now time.Time) {
	j.swept = now
	for gk, g := range j.groups {
		for i := 0; i < len(g); {
			if now.Sub(g[i].last) > j.cfg.Retain {
				j.dropped += uint64(len(g[i].samples))
				if g[i].early {
					j.early--
				}
				g[i] = g[len(g)-1]
				g = g[:len(g)-1]
				j.spans--
				continue
			}
			i++
		}
		if len(g) == 0 {
			delete(j.groups, gk)
		} else {
			j.groups[gk] = g
		}
	}
}

// merge weighs a span's samples by the time to the next sample (or to the
// span's end, durationNs into it), at most MaxGap, and merges those with
// the same stacks and state, heaviest first.
func (j *Joiner) merge(samples []rawSample, durationNs uint64) []snapshot.Sample {
	sort.SliceStable(samples, func(a, b int) bool { return samples[a].elapsedNs < samples[b].elapsedNs })
	maxGap := uint64(j.cfg.MaxGap)
	index := map[string]int{}
	var out []snapshot.Sample
	var key strings.Builder
	for i, s := range samples {
		next := durationNs
		if i+1 < len(samples) {
			next = samples[i+1].elapsedNs
		}
		var w uint64
		if next > s.elapsedNs {
			w = min(next-s.elapsedNs, maxGap)
		}
		key.Reset()
		if s.offCPU {
			key.WriteByte('o')
		}
		for _, fs := range [][]snapshot.Frame{s.user, s.kernel} {
			key.WriteByte(0)
			for _, f := range fs {
				key.WriteString(strconv.FormatUint(f.Addr, 16))
				key.WriteByte(' ')
			}
		}
		k, ok := index[key.String()]
		if !ok {
			k = len(out)
			index[key.String()] = k
			out = append(out, snapshot.Sample{OffCPU: s.offCPU, UserStack: s.user, KernelStack: s.kernel})
		}
		out[k].Count++
		out[k].WeightNs += w
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].WeightNs > out[b].WeightNs })
	return out
}

// Pending returns the number of spans whose samples wait for their end.
func (j *Joiner) Pending() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.spans
}

// Dropped returns the number of samples not kept (past MaxSamples or
// MaxSpans, or of spans that did not end within Retain).
func (j *Joiner) Dropped() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.dropped
}

// EarlyDropped returns the number of samples of spans sampled from their
// start (Watcher.SetEarly) that ended within their budgets, and so were
// dropped: what sampling from the start cost for nothing. It drops those
// whose time has come first.
func (j *Joiner) EarlyDropped() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.settle(j.cfg.Now())
	return j.earlyDropped
}
