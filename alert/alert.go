package alert

import (
	"context"
	"hash/fnv"
	"sort"
	"strconv"
	"time"
)

// State is where an alert is in its lifecycle.
type State string

const (
	StateInactive State = "inactive"
	StatePending  State = "pending"
	StateFiring   State = "firing"
	StateResolved State = "resolved"
)

// An Alert is one alert instance, identified by its labels. Its JSON form
// follows Alertmanager's alert objects where the two overlap.
type Alert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	State        State             `json:"state"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt,omitempty"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
	Fingerprint  string            `json:"fingerprint"`
	// Value is the value that made the alert fire, as rendered in
	// templates ("{{ .Value }}").
	Value string `json:"value,omitempty"`
	// Series is set on alerts fired by a slow span: the series the span
	// was counted in, for links to it (the alert's labels may have been
	// rewritten by the budget's templates). What the overrun record said
	// (stack, trace and span ids, duration) is in the annotations, which
	// the detector writes once.
	Series *SeriesRef `json:"series,omitempty"`
}

// A SeriesRef names one series: a span name in one cgroup.
type SeriesRef struct {
	Span     string `json:"span"`
	CgroupID uint64 `json:"cgroup_id,omitempty"`
}

// Name returns the alert's name (the alertname label).
func (a *Alert) Name() string { return a.Labels["alertname"] }

// Resolved reports whether the alert has ended.
func (a *Alert) Resolved() bool { return a.State == StateResolved }

// Fingerprint returns a stable hash of a label set, independent of map
// order, as 16 lower-case hex digits (the form Alertmanager shows).
func Fingerprint(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := fnv.New64a()
	for _, k := range keys {
		h.Write([]byte(k))
		h.Write([]byte{0xff})
		h.Write([]byte(labels[k]))
		h.Write([]byte{0xff})
	}
	s := strconv.FormatUint(h.Sum64(), 16)
	for len(s) < 16 {
		s = "0" + s
	}
	return s
}

// A Notifier delivers alerts. Notify returns once the alerts are accepted
// for delivery (a durable notifier may deliver later); retry reports whether
// the caller should try the same alerts again.
type Notifier interface {
	Notify(ctx context.Context, alerts ...*Alert) (retry bool, err error)
}
