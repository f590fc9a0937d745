package otlp

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spanwatch/spanwatch/internal/profile"
	"github.com/spanwatch/spanwatch/snapshot"
)

// An Exporter sends overrun records to an OTLP/HTTP endpoint as log
// records (OTLP/HTTP with JSON bodies), and with Config.Profiles their
// stacks as OTLP profiles (protobuf). Overrun never blocks: it queues the
// record, and Run sends the queue in batches, each batch as each signal,
// retrying what the endpoint may take later (429, 502, 503, 504, a
// connection error) with backoff until the request timeout has passed
// four times over. What is dropped (queue full) or given up on (refused,
// retries exhausted) is counted in Stats and logged.
type Exporter struct {
	cfg      Config
	resource []attr
	client   *http.Client
	log      *slog.Logger
	queue    chan item
	now      func() time.Time

	queued, dropped atomic.Uint64
	// logs and profiles are the two signals a batch goes out as
	// (profiles nil unless Config.Profiles).
	logs, profiles *signal
}

// An item is one queued overrun: its log record, and what its profile
// sample needs when profiles are sent.
type item struct {
	rec    record
	sample *sample
}

// A signal is one kind of request a batch is sent as: where to, how it
// is encoded, how its response reports a partial success, and its
// counts of overruns.
type signal struct {
	name        string // logs, profiles: the value of log lines' signal key
	url         string
	contentType string
	header      [2]string // one more header the signal needs, if any
	encode      func([]item) ([]byte, error)
	// rejected reads how many of a batch of n overruns a 2xx response's
	// partial success refused.
	rejected func(body []byte, n int) uint64

	sent, failed, refused atomic.Uint64
}

// Stats are an exporter's counts of records.
type Stats struct {
	// Queued records were accepted by Overrun; Sent ones were accepted
	// by the endpoint. Dropped found the queue full; Failed were given
	// up on after an error; Rejected were refused by the endpoint in a
	// partial success.
	Queued, Sent, Dropped, Failed, Rejected uint64
	// ProfileSamples counts the overruns sent as profile samples (with
	// Config.Profiles), as Sent, Failed and Rejected count the records;
	// a rejected profile counts all its samples.
	ProfileSamples SignalStats
}

// SignalStats are the counts of one signal's overruns.
type SignalStats struct{ Sent, Failed, Rejected uint64 }

// maxBatch bounds the records of one request; batchWait is how long a
// record waits for others before a batch goes.
const (
	maxBatch  = 512
	batchWait = time.Second
	// stackFrames is how many frames of the end stack a record's body
	// carries (the samples' hottest frames come first).
	stackFrames = 64
	// maxBody bounds the response body read.
	maxBody = 64 << 10
)

// New returns an Exporter for cfg. resource are the resource attributes
// every batch carries (service.name, host.name, ...).
func New(cfg Config, resource map[string]string, log *slog.Logger) (*Exporter, error) {
	if err := checkEndpoint(cfg.Endpoint); err != nil {
		return nil, fmt.Errorf("otlp endpoint %q: %w", cfg.Endpoint, err)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base := strings.TrimSuffix(cfg.Endpoint, "/")
	e := &Exporter{
		cfg:    cfg,
		client: &http.Client{Timeout: cfg.Timeout},
		log:    log,
		queue:  make(chan item, cfg.QueueSize),
		now:    time.Now,
	}
	e.logs = &signal{
		name: "logs", url: base + "/v1/logs", contentType: "application/json",
		encode: func(batch []item) ([]byte, error) { return json.Marshal(e.request(batch)) },
		rejected: func(b []byte, n int) uint64 {
			var ps struct {
				PartialSuccess struct {
					RejectedLogRecords json.Number `json:"rejectedLogRecords"`
				} `json:"partialSuccess"`
			}
			if json.Unmarshal(b, &ps) != nil {
				return 0
			}
			r, _ := strconv.ParseUint(string(ps.PartialSuccess.RejectedLogRecords), 10, 64)
			return min(r, uint64(n))
		},
	}
	if cfg.Profiles {
		e.profiles = &signal{
			name: "profiles", url: base + profilesPath, contentType: "application/x-protobuf",
			header: [2]string{profilesVersionHeader, profilesVersion},
			encode: func(batch []item) ([]byte, error) { return e.profilesRequest(batch), nil },
			rejected: func(b []byte, n int) uint64 {
				// One profile holds the batch: a rejected profile
				// is every sample of it.
				if r, err := profilesRejected(b); err == nil && r > 0 {
					return uint64(n)
				}
				return 0
			},
		}
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range resource {
			if !yield(k) {
				return
			}
		}
	}) {
		e.resource = append(e.resource, strAttr(k, resource[k]))
	}
	return e, nil
}

// Stats returns the exporter's counts.
func (e *Exporter) Stats() Stats {
	st := Stats{Queued: e.queued.Load(), Sent: e.logs.sent.Load(), Dropped: e.dropped.Load(), Failed: e.logs.failed.Load(), Rejected: e.logs.refused.Load()}
	if p := e.profiles; p != nil {
		st.ProfileSamples = SignalStats{Sent: p.sent.Load(), Failed: p.failed.Load(), Rejected: p.refused.Load()}
	}
	return st
}

// Profiles says whether the exporter sends profiles (Config.Profiles).
func (e *Exporter) Profiles() bool { return e.profiles != nil }

// Overrun queues one overrun record for export, without blocking.
func (e *Exporter) Overrun(o *snapshot.Overrun) {
	it := item{rec: e.record(o)}
	if e.profiles != nil {
		it.sample = newSample(o, &it.rec)
	}
	select {
	case e.queue <- it:
		e.queued.Add(1)
	default:
		if n := e.dropped.Add(1); n&(n-1) == 0 { // logged at the 1st, 2nd, 4th, 8th... drop
			e.log.Warn("otlp_queue_full_record_dropped", "dropped", n, "queue_size", e.cfg.QueueSize)
		}
	}
}

// Run sends queued records until ctx ends, then what is still queued,
// for at most one request timeout. A batch whose request was out, or
// waiting to be retried, when ctx ended gets one last try first, also
// bounded by the request timeout: a stop takes at most two for each
// signal sent (the records, and the profile with Config.Profiles).
func (e *Exporter) Run(ctx context.Context) {
	batch := make([]item, 0, maxBatch)
	timer := time.NewTimer(batchWait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			for {
				select {
				case r := <-e.queue:
					batch = append(batch, r)
					if len(batch) == maxBatch {
						e.flush(context.Background(), batch, false)
						batch = batch[:0]
					}
					continue
				default:
				}
				break
			}
			e.flush(context.Background(), batch, false)
			return
		case r := <-e.queue:
			batch = append(batch, r)
			if len(batch) < maxBatch {
				if len(batch) == 1 {
					timer.Reset(batchWait)
				}
				continue
			}
		case <-timer.C:
			if len(batch) == 0 {
				continue
			}
		}
		e.flush(ctx, batch, true)
		batch = batch[:0]
	}
}

// flush sends batch as each signal, retrying while retry allows: the
// log records, then the profile.
func (e *Exporter) flush(ctx context.Context, batch []item, retry bool) {
	if len(batch) == 0 {
		return
	}
	e.send(ctx, e.logs, batch, retry)
	if e.profiles != nil {
		e.send(ctx, e.profiles, batch, retry)
	}
}

// send sends batch as sig, retrying what may pass with backoff until the
// request timeout has passed four times over; a stop (ctx) leaves one
// last try.
func (e *Exporter) send(ctx context.Context, sig *signal, batch []item, retry bool) {
	body, err := sig.encode(batch)
	if err != nil { // not expected: the request is plain data
		sig.failed.Add(uint64(len(batch)))
		e.log.Error("otlp_encode_failed", "signal", sig.name, "records", len(batch), "error", err)
		return
	}
	deadline := e.now().Add(4 * e.cfg.Timeout)
	backoff := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		rejected, again, err := e.post(ctx, sig, body, len(batch))
		if err == nil {
			sig.sent.Add(uint64(len(batch)) - rejected)
			if rejected > 0 {
				sig.refused.Add(rejected)
				e.log.Warn("otlp_records_rejected", "signal", sig.name, "rejected", rejected, "records", len(batch))
			}
			return
		}
		if retry && ctx.Err() != nil {
			// The agent stopped while the request was out: one last
			// try, now, bounded by the request timeout alone.
			ctx, retry = context.WithoutCancel(ctx), false
			continue
		}
		if !again || !retry || e.now().Add(backoff).After(deadline) {
			sig.failed.Add(uint64(len(batch)))
			e.log.Error("otlp_export_failed", "signal", sig.name, "records", len(batch), "attempts", attempt, "error", err)
			return
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			// One last try, now: with a context the stop does not
			// cancel, or it could not be made.
			ctx, retry = context.WithoutCancel(ctx), false
		case <-time.After(wait):
		}
		backoff = min(2*backoff, 8*time.Second)
	}
}

// post sends one request of sig holding n overruns: rejected is how many
// a partial success refused; again says the error may pass.
func (e *Exporter) post(ctx context.Context, sig *signal, body []byte, n int) (rejected uint64, again bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sig.url, bytes.NewReader(body))
	if err != nil {
		return 0, false, err
	}
	for k, v := range e.cfg.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", sig.contentType)
	if sig.header[0] != "" {
		req.Header.Set(sig.header[0], sig.header[1])
	}
	if e.cfg.BearerTokenFile != "" {
		tok, err := readToken(e.cfg.BearerTokenFile)
		if err != nil {
			return 0, true, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, true, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return sig.rejected(b, n), false, nil
	case resp.StatusCode == 429, resp.StatusCode == 502, resp.StatusCode == 503, resp.StatusCode == 504:
		return 0, true, fmt.Errorf("%s: %s", resp.Status, firstLine(b))
	}
	return 0, false, fmt.Errorf("%s: %s", resp.Status, firstLine(b))
}

// readToken reads a bearer token file, at most 16 KiB, trimmed.
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 16<<10+1))
	if err != nil {
		return "", err
	}
	if len(b) > 16<<10 {
		return "", errors.New("bearer_token_file: larger than 16 KiB")
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsAny(tok, "\r\n") {
		return "", errors.New("bearer_token_file: want one line holding the token")
	}
	return tok, nil
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// record is one log record, as OTLP/JSON writes it.
type record struct {
	TimeUnixNano         string `json:"timeUnixNano"`
	ObservedTimeUnixNano string `json:"observedTimeUnixNano"`
	SeverityNumber       int    `json:"severityNumber"`
	SeverityText         string `json:"severityText"`
	EventName            string `json:"eventName"`
	Body                 value  `json:"body"`
	Attributes           []attr `json:"attributes"`
	TraceID              string `json:"traceId,omitempty"`
	SpanID               string `json:"spanId,omitempty"`
}

type attr struct {
	Key   string `json:"key"`
	Value value  `json:"value"`
}

type value struct {
	StringValue *string `json:"stringValue,omitempty"`
	IntValue    *string `json:"intValue,omitempty"` // OTLP/JSON writes 64-bit integers as strings
	BoolValue   *bool   `json:"boolValue,omitempty"`
}

func strAttr(k, v string) attr { return attr{Key: k, Value: value{StringValue: &v}} }
func intAttr(k string, v uint64) attr {
	s := strconv.FormatUint(v, 10)
	return attr{Key: k, Value: value{IntValue: &s}}
}

// EventName is the event name of the records an Exporter sends.
const EventName = "spanwatch.overrun"

// severityWarn is SEVERITY_NUMBER_WARN.
const severityWarn = 13

// record turns an overrun into a log record: its time, the trace and span
// ids where they are ids, the summary and the stack (profile.StackText)
// as body, and what it is about as attributes, named as OpenTelemetry's
// semantic conventions name them where they have a name.
func (e *Exporter) record(o *snapshot.Overrun) record {
	t := o.Time
	if t.IsZero() {
		t = e.now()
	}
	verb := "took"
	if o.StillRunning {
		verb = "has been running for"
	}
	body := fmt.Sprintf("span %s %s %v, over its %v budget", o.Span, verb, time.Duration(o.DurationNs), time.Duration(o.BudgetNs))
	if st := profile.StackText(o, stackFrames); st != "" {
		body += "\n" + st
	} else if o.StackError != "" {
		body += "\n(no stack: " + o.StackError + ")"
	}
	r := record{
		TimeUnixNano:         strconv.FormatInt(t.UnixNano(), 10),
		ObservedTimeUnixNano: strconv.FormatInt(e.now().UnixNano(), 10),
		SeverityNumber:       severityWarn,
		SeverityText:         "WARN",
		EventName:            EventName,
		Body:                 value{StringValue: &body},
	}
	if isHexID(o.TraceID, 32) {
		r.TraceID = strings.ToLower(o.TraceID)
	}
	if isHexID(o.SpanID, 16) {
		r.SpanID = strings.ToLower(o.SpanID)
	}
	a := []attr{
		strAttr("spanwatch.span.name", o.Span),
		intAttr("spanwatch.duration_ns", o.DurationNs),
		intAttr("spanwatch.budget_ns", o.BudgetNs),
		intAttr("process.pid", uint64(o.PID)),
		intAttr("thread.id", uint64(o.TID)),
	}
	if o.StillRunning {
		t := true
		a = append(a, attr{Key: "spanwatch.still_running", Value: value{BoolValue: &t}})
	}
	for _, kv := range [][2]string{
		{"process.executable.name", o.Comm},
		{"k8s.namespace.name", o.Namespace},
		{"k8s.pod.name", o.Pod},
		{"k8s.pod.uid", o.PodUID},
		{"k8s.container.name", o.Container},
		{"container.id", o.ContainerID},
		{"spanwatch.cgroup", o.Cgroup},
		{"spanwatch.unit", o.Unit},
		{"spanwatch.stack_error", o.StackError},
	} {
		if kv[1] != "" {
			a = append(a, strAttr(kv[0], kv[1]))
		}
	}
	if n := o.SampledNs(); n > 0 {
		a = append(a, intAttr("spanwatch.sampled_ns", n))
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range o.SourceLabels {
			if !yield(k) {
				return
			}
		}
	}) {
		a = append(a, strAttr("spanwatch.label."+k, o.SourceLabels[k]))
	}
	r.Attributes = a
	return r
}

// isHexID says whether s is an id of n hex digits, not all zero (OTLP's
// invalid id).
func isHexID(s string, n int) bool {
	if len(s) != n {
		return false
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(b, func(c byte) bool { return c != 0 })
}

// request is an ExportLogsServiceRequest in OTLP/JSON.
func (e *Exporter) request(batch []item) any {
	records := make([]record, len(batch))
	for i, it := range batch {
		records[i] = it.rec
	}
	type scope struct {
		Name    string `json:"name"`
		Version string `json:"version,omitempty"`
	}
	type scopeLogs struct {
		Scope      scope    `json:"scope"`
		LogRecords []record `json:"logRecords"`
	}
	type resource struct {
		Attributes []attr `json:"attributes"`
	}
	type resourceLogs struct {
		Resource  resource    `json:"resource"`
		ScopeLogs []scopeLogs `json:"scopeLogs"`
	}
	return struct {
		ResourceLogs []resourceLogs `json:"resourceLogs"`
	}{[]resourceLogs{{Resource: resource{Attributes: e.resource}, ScopeLogs: []scopeLogs{{Scope: scope{Name: "spanwatch"}, LogRecords: records}}}}}
}
