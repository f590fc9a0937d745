// Package typo finds the known word a mistyped one was meant to be: the
// one edit distance every "did you mean" hint in spanwatch is measured
// with (configuration keys, probe names, metric names, tracepoint fields),
// and the nearest candidate within a bound.
package typo
