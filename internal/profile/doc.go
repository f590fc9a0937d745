// Package profile turns overrun records (spans slower than their budget,
// with the stacks where they ended and the samples taken while they ran)
// into what people and stack tools read: a self-contained SVG flame graph
// and an HTML page, a pprof profile ("go tool pprof"), folded stacks
// (flamegraph.pl, speedscope, inferno), JSON and text. Reports leave the
// span SDKs' own frames out of the top of stacks (TrimOwn) and lead with
// the hottest application frames of a span's samples (Hottest).
//
//	overruns, err := profile.Read(f)            // snapshots or overruns, JSON
//	overruns, err = profile.Select(overruns, "checkout", false) // exact; true: a glob
//	stacks := profile.Aggregate(overruns)       // by span, comm, kind and stack
//	err = profile.WriteFlameGraph(w, stacks, profile.FlameOptions{})
//	start, end := profile.TimeRange(overruns)
//	p, err := profile.Pprof(stacks, start, end)
//	err = p.Write(w)                            // gzipped protobuf
//	err = profile.WriteFolded(w, stacks, profile.ValueDuration)
//
// ReportSchema documents the JSON form. Every output puts a span's name at
// the root of its stacks and weighs them by span time (ValueDuration):
// samples by the time each stands for, end stacks by the time no sample
// covers. It imports only the snapshot data model (and the glob syntax), so "spanwatch stacks"
// works on files recorded elsewhere, without BPF or root.
package profile
