// Package alert defines the Alert that the detector produces and notifiers
// deliver. It is a leaf, like snapshot, so notifiers and rule tooling need
// nothing else from spanwatch.
package alert
