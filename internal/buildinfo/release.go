package buildinfo

// Release is the version of spanwatch this tree is released as: the git
// tag (vMAJOR.MINOR.PATCH) that marks it, the Helm chart's appVersion (and
// its version, without the v), the image tag the Kubernetes manifest
// runs, and the version README's install line names. It is the one place
// a release changes; deploy/versions_test.go fails when any of the others
// disagrees with it, or when HEAD carries a tag that is not it.
//
// A build's own version (Get) comes from the linker or the toolchain, not
// from here: a build from a checkout between releases is not the release.
const Release = "v0.2.0"
