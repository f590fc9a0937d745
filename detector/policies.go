package detector

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/spanwatch/spanwatch/alert"
	"github.com/spanwatch/spanwatch/policy"
)

// Reasons a policy is cut off.
const (
	CutOffTimeout = "timeout"
	CutOffMemory  = "memory"
)

// A PolicyCutOff is a policy whose evaluations are being stopped at a
// limit: since its first cut-off, until it next evaluates in full.
type PolicyCutOff struct {
	Policy string `json:"policy"`
	// Reason is CutOffTimeout or CutOffMemory; Limit the limit it met
	// ("1s", "64MiB").
	Reason string    `json:"reason"`
	Limit  string    `json:"limit"`
	Since  time.Time `json:"since"`
	// Count is the evaluations cut off since.
	Count uint64 `json:"count"`
	// Error is the last cut-off's error: what the policy was doing.
	Error string `json:"error"`
}

// limits returns the policies' limits: the rule file's, else the
// detector's.
func (d *Detector) limits(cfg *policy.Config) (time.Duration, int64) {
	timeout, memory := cfg.Limits.Timeout, cfg.Limits.Memory
	if timeout <= 0 {
		timeout = d.cfg.PolicyTimeout
	}
	if memory <= 0 {
		memory = d.cfg.PolicyMemory
	}
	return timeout, memory
}

// evalPolicies evaluates the policies on up to PolicyWorkers goroutines,
// returning their outputs in policy order. One heap watch bounds their
// memory together (policy.WatchHeap): when it cuts the evaluations off
// while several ran, each of those is evaluated again alone, under a watch
// of its own, so that only a policy that outgrows the bound by itself is
// cut off.
func (d *Detector) evalPolicies(ctx context.Context, cfg *policy.Config, inputs []policy.InputValue, ext map[string]string) []*ruleOutput {
	pols := cfg.Policies
	timeout, memory := d.limits(cfg)
	outs := make([]*ruleOutput, len(pols))
	errs := make([]error, len(pols))
	wctx, stop := policy.WatchHeap(ctx, memory)
	eachIndex(len(pols), min(d.cfg.PolicyWorkers, len(pols)), func(i int) {
		outs[i], errs[i] = d.evalPolicy(wctx, timeout, pols[i], inputs[i], ext)
	})
	if cut := stop(); cut && len(pols) > 1 {
		for i, err := range errs {
			if errors.Is(err, policy.ErrHeapGrew) {
				wctx, stop := policy.WatchHeap(ctx, memory)
				outs[i], errs[i] = d.evalPolicy(wctx, timeout, pols[i], inputs[i], ext)
				stop()
			}
		}
	}
	for i, err := range errs {
		d.policyDone(pols[i].Name, err, timeout, memory)
	}
	return outs
}

// evalPolicy evaluates one policy under timeout; the error is returned
// for evalPolicies to report once the policy's last attempt is known.
func (d *Detector) evalPolicy(ctx context.Context, timeout time.Duration, p *policy.Policy, input policy.InputValue, ext map[string]string) (*ruleOutput, error) {
	out := &ruleOutput{key: groupKey("policy", p.Name), kind: "policy", name: p.Name, over: p.Over, forDur: p.For, keepFiringFor: p.KeepFiringFor, results: map[string]result{}}
	d.stats.policyEvaluations.Add(1)
	ectx, cancel := context.WithTimeout(ctx, timeout)
	alerts, err := p.Eval(ectx, input)
	cancel()
	if err != nil {
		out.failed = true
		return out, err
	}
	out.results = make(map[string]result, len(alerts))
	for _, a := range alerts {
		addExternal(a.Labels, ext)
		out.results[alert.Fingerprint(a.Labels)] = result{labels: a.Labels, annotations: a.Annotations, value: a.Annotations["value"]}
	}
	return out, nil
}

// policyDone counts and reports a policy's evaluation. A cut-off (time or
// memory) is logged when it begins, counted each time, and listed by
// PolicyCutOffs until the policy evaluates in full again, which is logged
// too; other errors are logged each time.
func (d *Detector) policyDone(name string, err error, timeout time.Duration, memory int64) {
	d.cutMu.Lock()
	defer d.cutMu.Unlock()
	prev := d.cutOff[name]
	if err == nil {
		if prev != nil {
			delete(d.cutOff, name)
			d.log.Info("policy_recovered", "policy", name, "reason", prev.Reason, "cut_off_evaluations", prev.Count, "since", prev.Since)
		}
		return
	}
	d.stats.policyErrors.Add(1)
	if d.cfg.OnRuleError != nil {
		d.cfg.OnRuleError(name, err)
	}
	var reason, limit string
	switch {
	case errors.Is(err, policy.ErrTimeout):
		d.stats.policyTimeouts.Add(1)
		reason, limit = CutOffTimeout, timeout.String()
	case errors.Is(err, policy.ErrMemory):
		d.stats.policyMemoryCutOffs.Add(1)
		reason, limit = CutOffMemory, policy.FormatSize(memory)
	default:
		d.log.Warn("policy_error", "policy", name, "error", err)
		return
	}
	if prev == nil || prev.Reason != reason || prev.Limit != limit {
		d.log.Warn("policy_cut_off", "policy", name, "reason", reason, "limit", limit, "error", err,
			"hint", "its alerts keep their state; it is tried again each evaluation, and this is logged again only when it recovers")
		prev = &PolicyCutOff{Policy: name, Reason: reason, Limit: limit, Since: time.Now()}
		d.cutOff[name] = prev
	}
	prev.Count++
	prev.Error = err.Error()
}

// PolicyCutOffs lists the policies whose evaluations are being cut off
// at a limit now, by name.
func (d *Detector) PolicyCutOffs() []PolicyCutOff {
	d.cutMu.Lock()
	defer d.cutMu.Unlock()
	out := make([]PolicyCutOff, 0, len(d.cutOff))
	for _, c := range d.cutOff {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Policy < out[j].Policy })
	return out
}
