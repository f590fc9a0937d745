//go:build race

package emit_test

// raceEnabled: the race detector's runtime (racecall, __tsan_*) is the leaf
// of most samples taken in instrumented code, and its slowdown moves where
// the samples fall.
const raceEnabled = true
