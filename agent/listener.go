//go:build linux

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/exporter-toolkit/web"
	"golang.org/x/net/netutil"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/config"
	"github.com/spanwatch/spanwatch/detector"
)

// listener serves the agent's HTTP endpoints:
//
//	GET /metrics            Prometheus metrics
//	GET /-/healthy          200 while the agent serves (liveness)
//	GET /-/ready            200 once the BPF objects are loaded and the
//	                        first snapshot is taken, 503 while starting or
//	                        shutting down (readiness; ready.go)
//	GET /snapshot           the newest snapshot; ?span=NAME&cgroup_id=ID
//	                        keeps the matching series and overruns (what an
//	                        alert's generatorURL points at)
//	GET /api/alerts         the pending and firing alerts, as JSON
//	GET /api/status         reloads, cut-off policies, and settings
//	                        waiting for a restart
//	GET /api/dead-letters   the outbox's dead letters, as JSON
//
// It follows the Prometheus exporters' convention: exporter-toolkit serves
// it, with TLS and basic authentication from a web configuration file
// (--web.config.file, listener.web_config_file). /snapshot and /api/* are
// served only to an authenticated client (listener_access.go). Every
// response is bounded: MaxInFlight at once per heavy endpoint (503 past
// it), written within the write timeout, and cut off when its client
// reads nothing for StallTimeout.
type listener struct {
	a       *Agent
	ln      net.Listener
	srv     *http.Server
	set     config.ListenerSettings
	web     *webConfig // as read at the start; nil without a file
	access  *access
	metrics *listenerMetrics
	// stall is StallTimeout (shorter in tests).
	stall time.Duration
}

// endpoint is one path of the listener and what guards it.
type endpoint struct {
	path string
	// sensitive endpoints need an authenticated client.
	sensitive bool
	// heavy endpoints write responses that grow with the series: at most
	// MaxInFlight at once.
	heavy bool
	h     http.HandlerFunc
}

// listen binds addr: a port in use is an error that stops the agent
// rather than a log line while it runs without its endpoints. It says
// what it serves to whom, and warns when that reaches beyond loopback in
// clear text or without authentication.
func listen(a *Agent, addr string, set config.ListenerSettings) (*listener, error) {
	l := &listener{a: a, set: set, access: &access{webFile: set.WebConfigFile, euid: uint32(os.Geteuid())}, stall: StallTimeout}
	if set.MaxInFlight <= 0 {
		l.set.MaxInFlight = config.DefaultMaxInFlight
	}
	if set.WriteTimeout <= 0 {
		l.set.WriteTimeout = config.DefaultWriteTimeout
	}
	if set.WebConfigFile != "" {
		var err error
		if l.web, err = readWebConfig(set.WebConfigFile); err != nil {
			return nil, fmt.Errorf("listener: web configuration: %w", err)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w (is another process using the port? choose another with --metrics-addr)", addr, err)
	}
	l.ln = netutil.LimitListener(ln, MaxConnections)
	l.metrics = newListenerMetrics()
	eps := []endpoint{
		{path: "/-/healthy", h: func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") }},
		{path: "/-/ready", h: l.ready},
		{path: "/snapshot", sensitive: true, heavy: true, h: l.snapshot},
		{path: "/api/alerts", sensitive: true, heavy: true, h: l.alerts},
		{path: "/api/status", sensitive: true, h: l.status},
		{path: "/api/dead-letters", sensitive: true, heavy: true, h: l.deadLetters},
	}
	if a.exporter != nil {
		eps = append(eps, endpoint{path: "/metrics", heavy: true, h: a.exporter.Handler().ServeHTTP})
	}
	mux := http.NewServeMux()
	for _, ep := range eps {
		mux.Handle("GET "+ep.path, l.guard(ep))
	}
	l.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      l.set.WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ConnContext:       withConn,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelDebug),
	}
	if a.exporter != nil {
		a.exporter.Registry().MustRegister(l.metrics)
	}

	bound := ln.Addr().String()
	tls, auth := l.web.tlsEnabled(), l.web.authentication()
	sensitive := "authenticated clients: " + auth
	if auth == "none" {
		sensitive = "root over loopback only"
	}
	a.log.Info("listening", "addr", bound, "tls", tls, "authentication", auth, "web_config_file", set.WebConfigFile,
		"metrics", "every client", "snapshot_and_api", sensitive, "kernel_addresses", set.KernelAddresses)
	if scope := beyondLoopback(ln.Addr()); scope != "" && (!tls || auth == "none") {
		var risks []string
		if !tls {
			risks = append(risks, "in clear text")
		}
		if auth == "none" {
			risks = append(risks, "/metrics (span names, cgroups, pods) to anyone who reaches it")
		}
		a.log.Warn("listening_beyond_loopback", "addr", bound, "reach", scope, "tls", tls, "authentication", auth,
			"serves", strings.Join(risks, "; "),
			"hint", "give a web configuration file (--web.config.file: tls_server_config, basic_auth_users) or listen on 127.0.0.1:PORT")
	}
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

// serve serves the endpoints through exporter-toolkit, which adds TLS and
// basic authentication when the web configuration has them.
func (l *listener) serve() {
	file := l.set.WebConfigFile
	flags := &web.FlagConfig{WebConfigFile: &file}
	logger := l.a.log.With("component", "exporter-toolkit")
	go func() {
		if err := web.Serve(l.ln, l.srv, flags, logger); err != nil && err != http.ErrServerClosed {
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

// guard wraps an endpoint's handler in its limits: who may read it, how
// many responses at once, and how long one may take to write.
func (l *listener) guard(ep endpoint) http.Handler {
	var sl *slots
	if ep.heavy {
		sl = &slots{max: l.set.MaxInFlight, clients: map[string]bool{}}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var who string
		if ep.sensitive {
			var err error
			if who, err = l.access.identify(r); err != nil {
				l.metrics.rejected.WithLabelValues(ep.path, "forbidden").Inc()
				writeError(w, http.StatusForbidden, "%s serves every process's stacks, pids and cgroups: only to a client authenticated by the web configuration (basic_auth_users or verified client certificates; --web.config.file) or to root over loopback; %v", ep.path, err)
				return
			}
		}
		if sl != nil {
			client := clientOf(r)
			switch reason := sl.take(client); reason {
			case "":
				defer sl.give(client)
			default:
				l.metrics.rejected.WithLabelValues(ep.path, reason).Inc()
				w.Header().Set("Retry-After", "1")
				if reason == "client_busy" {
					writeError(w, http.StatusServiceUnavailable, "%s is writing a response to %s already: one at a time per client", ep.path, client)
				} else {
					writeError(w, http.StatusServiceUnavailable, "%s is writing %d responses already (listener.max_in_flight): try again", ep.path, sl.max)
				}
				return
			}
		}
		sw := &stallWriter{ResponseWriter: w, rc: http.NewResponseController(w), stall: l.stall, end: time.Now().Add(l.set.WriteTimeout)}
		ep.h(sw, r.WithContext(context.WithValue(r.Context(), clientKey{}, who)))
		if sw.stalled {
			l.metrics.stalled.WithLabelValues(ep.path).Inc()
		}
	})
}

// slots bound an endpoint's responses in flight: max in all, one per
// client, so that one client that reads slowly cannot hold them all.
type slots struct {
	mu      sync.Mutex
	n, max  int
	clients map[string]bool
}

// take takes a slot for client, or says why not: "busy" (every slot is
// taken) or "client_busy" (the client holds one).
func (s *slots) take(client string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.clients[client]:
		return "client_busy"
	case s.n >= s.max:
		return "busy"
	}
	s.n++
	s.clients[client] = true
	return ""
}

func (s *slots) give(client string) {
	s.mu.Lock()
	s.n--
	delete(s.clients, client)
	s.mu.Unlock()
}

// clientOf names the client of r for the per-client limit: its address,
// or on loopback, where every local process shares 127.0.0.1, the user
// that owns its socket.
func clientOf(r *http.Request) string {
	if ci, _ := r.Context().Value(connKey{}).(*connInfo); ci != nil {
		if uid, err := ci.peerUID(); err == nil {
			return fmt.Sprintf("uid %d on this host", uid)
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// clientKey holds, in a sensitive endpoint's request context, who the
// client proved to be.
type clientKey struct{}

// kernelAddrs says whether r may be served raw kernel addresses: only with
// listener.kernel_addresses, and only to an authenticated client.
func (l *listener) kernelAddrs(r *http.Request) bool {
	who, _ := r.Context().Value(clientKey{}).(string)
	return l.set.KernelAddresses && who != ""
}

// stallWriter cuts a response off when its client accepts nothing for
// StallTimeout, and at its end time in any case: each write moves the
// connection's write deadline to StallTimeout ahead (at most to end), so
// a slow reader holds the response's memory for StallTimeout, not for as
// long as it likes.
type stallWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	stall   time.Duration
	end     time.Time
	set     time.Time // when the deadline was last moved
	stalled bool
}

func (w *stallWriter) Write(p []byte) (int, error) {
	// Moving the deadline costs a timer update: not more than once a
	// second, so a deadline is always between StallTimeout-1s and
	// StallTimeout after the last write began.
	if now := time.Now(); now.Sub(w.set) >= time.Second {
		w.set = now
		d := now.Add(w.stall)
		if d.After(w.end) {
			d = w.end
		}
		w.rc.SetWriteDeadline(d)
	}
	n, err := w.ResponseWriter.Write(p)
	if err != nil && isTimeout(err) {
		w.stalled = true
	}
	return n, err
}

func (w *stallWriter) Flush() { w.rc.Flush() }

// Unwrap lets http.ResponseController reach the connection.
func (w *stallWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// listenerMetrics count what the listener refused or cut off.
type listenerMetrics struct {
	rejected *prometheus.CounterVec
	stalled  *prometheus.CounterVec
}

func newListenerMetrics() *listenerMetrics {
	return &listenerMetrics{
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "spanwatch", Name: "listener_rejected_total",
			Help: "Requests the listener refused: reason busy (max_in_flight responses of the endpoint being written: 503), client_busy (one being written to the same client: 503), forbidden (a sensitive endpoint and an unauthenticated client: 403)."},
			[]string{"handler", "reason"}),
		stalled: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "spanwatch", Name: "listener_write_timeouts_total",
			Help: "Responses cut off because the client read nothing for 10s or the write timeout passed."},
			[]string{"handler"}),
	}
}

func (m *listenerMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.rejected.Describe(ch)
	m.stalled.Describe(ch)
}

func (m *listenerMetrics) Collect(ch chan<- prometheus.Metric) {
	m.rejected.Collect(ch)
	m.stalled.Collect(ch)
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
	if !l.kernelAddrs(r) {
		s = s.WithoutKernelAddrs()
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
	RestartPending []config.RestartChange `json:"restart_pending"`
	// PoliciesCutOff lists the Rego policies whose evaluations are being
	// cut off at their time or memory limit (policy_limits:).
	PoliciesCutOff []detector.PolicyCutOff `json:"policies_cut_off"`
}

func (l *listener) status(w http.ResponseWriter, r *http.Request) {
	cfg := l.a.Config()
	st := l.a.ReloadStats()
	out := Status{
		Config: cfg.Path, Interval: cfg.Collector.Interval.String(), ExternalURL: l.a.externalURL(),
		Reloads: st.Reloads, ReloadFailures: st.Failures, RestartPending: l.a.PendingRestart(),
		PoliciesCutOff: l.a.det.PolicyCutOffs(),
	}
	out.LastReloadSuccessful = st.LastError == nil
	if st.LastError != nil {
		out.LastReload = st.LastError.Error()
	}
	if out.RestartPending == nil {
		out.RestartPending = []config.RestartChange{}
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
	var u string
	if p := a.externalURLs.Load(); p != nil {
		u = *p
	}
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
	scheme := "http"
	if a.listener.web.tlsEnabled() {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
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
	if sr := al.Series; sr != nil {
		span = sr.Span
		if sr.CgroupID != 0 {
			id = strconv.FormatUint(sr.CgroupID, 10)
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
