//go:build race

package main

// raceEnabled: the race detector's instrumentation keeps the compiler from
// inlining runtime.Callers into its callers.
const raceEnabled = true
