// Package markerabi holds what the span SDKs' markers and the collector
// that attaches to them (source/marker) must agree on: where the
// enable word sits in the Go SDK's (emit) probe variable and in
// libspanwatch's probe (include/spanwatch.h), and the magics that follow
// them so that the collector finds the word, and the C marker, in binaries
// without a symbol table. Both Go sides import these constants; the C
// header spells the same values, and the collector's tests check them
// against binaries built from it. The package imports nothing, so that
// emit stays light.
package markerabi
