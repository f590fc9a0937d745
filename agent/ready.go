//go:build linux

package agent

import (
	"io"
	"net/http"
)

// phase is where the agent is in its life, for GET /-/ready. Prometheus'
// own convention: /-/healthy answers 200 while the process serves HTTP,
// /-/ready only while it does its work.
type phase int32

const (
	// phaseLoading: Run has not loaded and attached the BPF objects yet
	// (the verifier can take seconds on a large kernel).
	phaseLoading phase = iota
	// phaseFirstSnapshot: attached, waiting for the first snapshot, one
	// interval after the start.
	phaseFirstSnapshot
	// phaseReady: a snapshot was taken; rules run.
	phaseReady
	// phaseStopping: the context ended; the final snapshot is being taken
	// and the listener closes next.
	phaseStopping
)

// notReady says why the agent is not ready, or "" when it is.
func (p phase) notReady() string {
	switch p {
	case phaseLoading:
		return "starting: loading and attaching the BPF objects"
	case phaseFirstSnapshot:
		return "starting: waiting for the first snapshot (one interval after the start)"
	case phaseStopping:
		return "shutting down"
	}
	return ""
}

// ready answers GET /-/ready: 200 once the BPF objects are loaded and the
// first snapshot is taken, 503 with the reason while starting or shutting
// down. Like /-/healthy it costs nothing and goes to every client the web
// configuration admits.
func (l *listener) ready(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if why := phase(l.a.phase.Load()).notReady(); why != "" {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "not ready: "+why+"\n")
		return
	}
	io.WriteString(w, "ready\n")
}
