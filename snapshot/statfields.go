package snapshot

// A StatField is one of the collector's numbers in Stats (the per-source
// maps and lists aside): its JSON field name, whether it is a level (what
// holds now, as series_live) rather than a count over the window, and how
// to read it.
type StatField struct {
	Name  string
	Level bool
	Get   func(*Stats) uint64
}

// StatFields are Stats' numbers, in the order of its JSON fields, read_ns
// aside (a duration, not a count): the one projection of the stats from
// which the Rego input's input.stats (policy) and the exporter's counters
// and gauges (metrics) are built. TestStatFields checks it against the
// JSON fields.
var StatFields = []StatField{
	{"events", false, func(s *Stats) uint64 { return s.Events }},
	{"ringbuf_drops", false, func(s *Stats) uint64 { return s.RingbufDrops }},
	{"stats_full", false, func(s *Stats) uint64 { return s.StatsFull }},
	{"histogram_full", false, func(s *Stats) uint64 { return s.HistogramFull }},
	{"names_truncated", false, func(s *Stats) uint64 { return s.NamesTruncated }},
	{"quota_other", false, func(s *Stats) uint64 { return s.QuotaOther }},
	{"names_full", false, func(s *Stats) uint64 { return s.NamesFull }},
	{"extremes_dropped", false, func(s *Stats) uint64 { return s.ExtremesDropped }},
	{"symbolizer_bytes", true, func(s *Stats) uint64 { return s.SymbolizerBytes }},
	{"recursion_misses", false, func(s *Stats) uint64 { return s.RecursionMisses }},
	{"series_live", true, func(s *Stats) uint64 { return s.SeriesLive }},
	{"series_capacity", true, func(s *Stats) uint64 { return s.SeriesCapacity }},
	{"bpf_map_bytes", true, func(s *Stats) uint64 { return s.BPFMapBytes }},
	{"short_events", false, func(s *Stats) uint64 { return s.ShortEvents }},
	{"read_errors", false, func(s *Stats) uint64 { return s.ReadErrors }},
	{"overruns_dropped", false, func(s *Stats) uint64 { return s.OverrunsDropped }},
	{"overruns_queue_dropped", false, func(s *Stats) uint64 { return s.OverrunsQueueDropped }},
	{"early_samples_discarded", false, func(s *Stats) uint64 { return s.EarlySamplesDiscarded }},
}
