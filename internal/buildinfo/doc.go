// Package buildinfo says which spanwatch this is: the version and source
// revision stamped at build time, for "spanwatch version", --version and
// the spanwatch_build_info metric.
//
// A release build stamps them with the linker:
//
//	go build -ldflags "-X github.com/spanwatch/spanwatch/internal/buildinfo.version=v0.2.0 \
//	    -X github.com/spanwatch/spanwatch/internal/buildinfo.revision=$(git rev-parse HEAD)" \
//	    ./cmd/spanwatch
//
// Without them the Go toolchain's own build info answers: "go install
// github.com/spanwatch/spanwatch/cmd/spanwatch@v0.2.0" records v0.2.0, and
// a build in a git checkout records a pseudo-version and the commit
// (Go 1.24+, unless -buildvcs=false).
package buildinfo
