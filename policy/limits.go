package policy

import (
	"errors"
	"fmt"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/rotate"
)

// Defaults and bounds of policy_limits:.
const (
	// DefaultPolicyTimeout bounds each policy's evaluation.
	DefaultPolicyTimeout = time.Second
	MaxPolicyTimeout     = time.Minute
	// DefaultPolicyMemory is how far the agent's Go heap may grow while
	// the policies of one snapshot evaluate: an eighth of the DaemonSet's
	// 512 MiB limit. Ten policies that each walk 10k series allocate about
	// 50 MB in all, most of it garbage before the evaluation ends, and keep
	// far less.
	DefaultPolicyMemory = 64 << 20
	MinPolicyMemory     = 4 << 20
	MaxPolicyMemory     = 16 << 30
)

// ErrMemory is returned (wrapped) by Policy.Eval when a policy was cut off
// at its memory bound: a builtin asked for more than the bound allows, or
// the Go heap grew past it while the policy ran.
var ErrMemory = errors.New("policy evaluation exceeded its memory bound")

// ErrHeapGrew wraps ErrMemory when the cut-off came from a heap watch
// (WatchHeap) rather than from a builtin: the heap's growth may have been
// another evaluation's under the same watch.
var ErrHeapGrew = fmt.Errorf("%w: the agent's heap grew past the bound while it ran", ErrMemory)

// Limits bound the evaluation of a rule file's policies: the
// policy_limits: section,
//
//	policy_limits:
//	  timeout: 1s     # each policy's evaluation
//	  memory: 64MiB   # how far the agent's heap may grow while they run
//
// A zero field is one the file leaves out: the detector's default
// applies (DefaultPolicyTimeout, DefaultPolicyMemory). A reload applies
// changes.
type Limits struct {
	Timeout time.Duration
	Memory  int64
}

var limitKeys = []string{"timeout", "memory"}

func (d *decoder) limits(n *yaml.Node) Limits {
	var l Limits
	n = section.Resolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return l
	}
	d.Fields(n, "policy_limits", limitKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "timeout":
			t, ok := d.duration(v, "policy_limits.timeout")
			switch {
			case !ok:
			case t <= 0 || t > MaxPolicyTimeout:
				d.errorf(v, "policy_limits.timeout: %s is out of range: want more than 0 and at most %s (default %s)", section.Resolve(v).Value, MaxPolicyTimeout, DefaultPolicyTimeout)
			default:
				l.Timeout = t
			}
		case "memory":
			v = section.Resolve(v)
			if v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!str" && v.ShortTag() != "!!int") {
				d.errorf(v, "policy_limits.memory must be a size such as 64MiB, not %s", section.KindName(v))
				return
			}
			b, err := rotate.ParseSize(v.Value)
			switch {
			case err != nil:
				d.errorf(v, "policy_limits.memory: %v", err)
			case b < MinPolicyMemory || b > MaxPolicyMemory:
				d.errorf(v, "policy_limits.memory: %s is out of range: want %s to %s (default %s)", v.Value, FormatSize(MinPolicyMemory), FormatSize(MaxPolicyMemory), FormatSize(DefaultPolicyMemory))
			default:
				l.Memory = b
			}
		}
	})
	return l
}

// FormatSize renders a byte count in the largest binary unit that divides
// it, the way policy_limits.memory is written: 64MiB.
func FormatSize(b int64) string {
	for _, u := range []struct {
		name string
		n    int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b >= u.n && b%u.n == 0 {
			return fmt.Sprintf("%d%s", b/u.n, u.name)
		}
	}
	return fmt.Sprintf("%dB", b)
}
