// Package snapshot holds spanwatch's data model: the Snapshot a collector
// produces every interval and every rule and policy reads, and the Overrun
// record a slow span produces.
//
// It is a leaf: it imports nothing from spanwatch and nothing that needs BPF,
// root or Linux, so rule tooling (spanwatch check, spanwatch test) builds and
// runs anywhere. The JSON form is stable and documented by schema.json.
// LineWriter writes snapshots as JSON lines of bounded length (a long one
// in parts, each a line); Reader reads them back whole; Encode streams a
// snapshot's indented form item by item.
//
// It owns the window maths: an Accumulator combines series (the windows
// of a rule's range, a series counted twice in one window) and Quantile's
// rule takes every quantile, of one window's histogram or of merged ones.
package snapshot
