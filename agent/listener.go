//go:build linux

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spanwatch/spanwatch/alert"
)

// listener serves the agent's HTTP endpoints:
//
//	GET /metrics            Prometheus metrics
//	GET /snapshot           the newest snapshot; ?span=NAME&cgroup_id=ID
//	                        keeps the matching series and overruns (what an
//	                        alert's generatorURL points at)
//	GET /api/alerts         the pending and firing alerts, as JSON
//	GET /api/status         reloads, and settings waiting for a restart
//	GET /api/dead-letters   the outbox's dead letters, as JSON
type listener struct {
	a   *Agent
	ln  net.Listener
	srv *http.Server
}

// listen binds addr: a port in use is an error that stops the agent
// rather than a log line while it runs without its endpoints. An address
// that reaches beyond loopback is logged as such.
func listen(a *Agent, addr string) (*listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w (is another process using the port? choose another with --metrics-addr)", addr, err)
	}
	l := &listener{a: a, ln: ln}
	mux := http.NewServeMux()
	if a.exporter != nil {
		mux.Handle("GET /metrics", a.exporter.Handler())
	}
	mux.HandleFunc("GET /snapshot", l.snapshot)
	mux.HandleFunc("GET /api/alerts", l.alerts)
	mux.HandleFunc("GET /api/status", l.status)
	mux.HandleFunc("GET /api/dead-letters", l.deadLetters)
	l.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	bound := ln.Addr().String()
	if scope := beyondLoopback(ln.Addr()); scope != "" {
		a.log.Warn("listening_beyond_loopback", "addr", bound, "reach", scope,
			"serves", "/metrics /snapshot /api/alerts /api/status /api/dead-letters",
			"hint", "listen on 127.0.0.1:PORT to keep them on this host")
	}
	a.log.Info("listening", "addr", bound)
	return l, nil
}

// beyondLoopback says who else can reach a bound address: "" for loopback
// only.
func beyondLoopback(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return "unknown"
	}
	switch {
	case tcp.IP.IsLoopback():
		return ""
	case tcp.IP.IsUnspecified():
		return "every interface"
	}
	return "the network of " + tcp.IP.String()
}

func (l *listener) serve() {
	go func() {
		if err := l.srv.Serve(l.ln); err != nil && err != http.ErrServerClosed {
			l.a.log.Error("listener_failed", "addr", l.ln.Addr().String(), "error", err)
		}
	}()
}

func (l *listener) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := l.srv.Shutdown(ctx); err != nil {
		l.srv.Close()
	}
	l.ln.Close() // when Serve never ran
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, format string, a ...any) {
	writeJSON(w, code, map[string]string{"error": fmt.Sprintf(format, a...)})
}

// snapshot serves the newest snapshot, or the part of it one series
// makes: the series whose span (and cgroup id) match, and their overruns.
func (l *listener) snapshot(w http.ResponseWriter, r *http.Request) {
	s := l.a.last.get()
	if s == nil {
		writeError(w, http.StatusServiceUnavailable, "no snapshot yet: the first is taken one interval after the start")
		return
	}
	q := r.URL.Query()
	span, idText := q.Get("span"), q.Get("cgroup_id")
	if span == "" && idText == "" {
		w.Header().Set("Content-Type", "application/json")
		s.Encode(w)
		return
	}
	var id uint64
	if idText != "" {
		var err error
		if id, err = strconv.ParseUint(idText, 10, 64); err != nil {
			writeError(w, http.StatusBadRequest, "cgroup_id %q is not a number", idText)
			return
		}
	}
	match := func(name string, cg uint64) bool {
		return (span == "" || name == span) && (idText == "" || cg == id)
	}
	part := *s
	part.Series, part.Overruns = nil, nil
	for i := range s.Series {
		if match(s.Series[i].Span, s.Series[i].CgroupID) {
			part.Series = append(part.Series, s.Series[i])
		}
	}
	for i := range s.Overruns {
		if match(s.Overruns[i].Span, s.Overruns[i].CgroupID) {
			part.Overruns = append(part.Overruns, s.Overruns[i])
		}
	}
	if len(part.Series) == 0 && len(part.Overruns) == 0 {
		writeError(w, http.StatusNotFound, "no series %s in the snapshot of %s: it had no spans in that interval", describeSeries(span, idText), s.Time.Format(time.RFC3339))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	part.Encode(w)
}

func describeSeries(span, id string) string {
	var parts []string
	if span != "" {
		parts = append(parts, "span="+strconv.Quote(span))
	}
	if id != "" {
		parts = append(parts, "cgroup_id="+id)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// alerts serves the pending and firing alerts, sorted by name.
func (l *listener) alerts(w http.ResponseWriter, r *http.Request) {
	list := l.a.det.Alerts()
	for _, al := range list {
		l.a.setURL(al)
	}
	if list == nil {
		list = []*alert.Alert{}
	}
	writeJSON(w, http.StatusOK, list)
}

// Status is what GET /api/status answers.
type Status struct {
	// Config is the configuration file ("" for a built-in one).
	Config   string `json:"config"`
	Interval string `json:"interval"`
	// ExternalURL is where alerts' generatorURLs point.
	ExternalURL    string `json:"external_url,omitempty"`
	Reloads        uint64 `json:"reloads"`
	ReloadFailures uint64 `json:"reload_failures"`
	// LastReloadSuccessful is false while the file's current contents
	// are refused (LastReload says why): what runs is an older file.
	LastReloadSuccessful bool   `json:"last_reload_successful"`
	LastReload           string `json:"last_reload_error,omitempty"`
	// RestartPending lists the settings the file changes that only a
	// restart applies.
	RestartPending []RestartChange `json:"restart_pending"`
}

func (l *listener) status(w http.ResponseWriter, r *http.Request) {
	cfg := l.a.Config()
	st := l.a.ReloadStats()
	out := Status{
		Config: cfg.Path, Interval: cfg.Collector.Interval.String(), ExternalURL: l.a.externalURL(),
		Reloads: st.Reloads, ReloadFailures: st.Failures, RestartPending: l.a.PendingRestart(),
	}
	out.LastReloadSuccessful = st.LastError == nil
	if st.LastError != nil {
		out.LastReload = st.LastError.Error()
	}
	if out.RestartPending == nil {
		out.RestartPending = []RestartChange{}
	}
	writeJSON(w, http.StatusOK, out)
}

// deadLetters serves the outbox's dead letters, oldest first.
func (l *listener) deadLetters(w http.ResponseWriter, r *http.Request) {
	if l.a.dispatcher == nil {
		writeError(w, http.StatusNotFound, "no outbox: the configuration has no webhooks")
		return
	}
	list, err := l.a.dispatcher.DeadLetters()
	if err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	if list == nil {
		writeJSON(w, http.StatusOK, []struct{}{})
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// externalURL is the base of generatorURLs: the configured external URL,
// else, with a listener, http://NODE:PORT (NODE_NAME or the host name, as
// Prometheus defaults its own), else nothing.
func (a *Agent) externalURL() string {
	a.mu.Lock()
	u := a.cfg.ExternalURL
	a.mu.Unlock()
	if u != "" {
		return strings.TrimRight(u, "/")
	}
	if a.listener == nil {
		return ""
	}
	_, port, err := net.SplitHostPort(a.listener.ln.Addr().String())
	if err != nil {
		return ""
	}
	host := os.Getenv("NODE_NAME")
	if host == "" {
		host, _ = os.Hostname()
	}
	return "http://" + net.JoinHostPort(host, port)
}

// setURL points an alert's generatorURL at its series on the listener:
// /snapshot?span=NAME&cgroup_id=ID, with what the alert knows of the two.
func (a *Agent) setURL(al *alert.Alert) {
	if al.GeneratorURL != "" {
		return
	}
	al.GeneratorURL = generatorURL(a.externalURL(), al)
}

func generatorURL(base string, al *alert.Alert) string {
	if base == "" {
		return ""
	}
	q := url.Values{}
	span, id := al.Labels["span"], al.Labels["cgroup_id"]
	if o := al.Overrun; o != nil {
		span = o.Span
		if o.CgroupID != 0 {
			id = strconv.FormatUint(o.CgroupID, 10)
		}
	}
	if span != "" {
		q.Set("span", span)
	}
	if id != "" {
		q.Set("cgroup_id", id)
	}
	if len(q) == 0 {
		return base + "/snapshot"
	}
	return base + "/snapshot?" + q.Encode()
}
