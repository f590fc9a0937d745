package detector

import (
	"maps"
	"os"
	"sync"

	"github.com/spanwatch/spanwatch/policy"
)

// NodeLabel is the external label that names the node an alert comes
// from, unless the configuration says otherwise.
const NodeLabel = "node"

// NodeName names the node the agent runs on: $NODE_NAME when set (a
// DaemonSet sets it from the pod's node, where os.Hostname is the pod's
// name), else the host name.
func NodeName() string {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	return h
}

// DefaultExternalLabels are the external labels of a detector whose
// Config leaves them nil: {node: NodeName()}.
func DefaultExternalLabels() map[string]string {
	if n := NodeName(); n != "" {
		return map[string]string{NodeLabel: n}
	}
	return map[string]string{}
}

// externalLabels merges the detector's external labels with a rule set's
// (which win; "" removes one), once per rule set.
type externalLabels struct {
	base map[string]string

	mu     sync.Mutex
	cfg    *policy.Config
	merged map[string]string
}

func (e *externalLabels) get(cfg *policy.Config) map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.merged != nil && e.cfg == cfg {
		return e.merged
	}
	m := maps.Clone(e.base)
	if m == nil {
		m = map[string]string{}
	}
	if cfg != nil {
		for k, v := range cfg.ExternalLabels {
			if v == "" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
	}
	e.cfg, e.merged = cfg, m
	return m
}

// addExternal adds the external labels an alert's labels do not set
// themselves: an alert's own labels win, as in Prometheus.
func addExternal(labels, ext map[string]string) {
	for k, v := range ext {
		if _, ok := labels[k]; !ok {
			labels[k] = v
		}
	}
}
