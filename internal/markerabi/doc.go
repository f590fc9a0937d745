// Package markerabi holds what the span SDK's marker (emit) and the
// collector that attaches to it (collector/marker.go) must agree on: where
// the enable word sits in emit's probe variable, and the magic that
// follows it so that the collector finds the word in binaries without a
// symbol table. Both import these constants; the package imports nothing,
// so that emit stays light.
package markerabi
