// Package profile turns overrun records (spans slower than their budget,
// with their symbolized stacks) into the formats stack tools read: a pprof
// profile ("go tool pprof"), folded stacks (flamegraph.pl, speedscope,
// inferno) and JSON.
//
//	overruns, err := profile.Read(f)            // snapshots or overruns, JSON
//	overruns, err = profile.Select(overruns, "checkout*")
//	stacks := profile.Aggregate(overruns)       // by span, comm and stack
//	start, end := profile.TimeRange(overruns)
//	p, err := profile.Pprof(stacks, start, end)
//	err = p.Write(w)                            // gzipped protobuf
//	err = profile.WriteFolded(w, stacks, profile.ValueCount)
//
// ReportSchema documents the JSON form. A pprof sample is one distinct stack; its values are the number of
// overruns and their total duration in nanoseconds. It imports only the
// snapshot data model (and the glob syntax), so "spanwatch stacks" works on files recorded
// elsewhere, without BPF or root.
package profile
