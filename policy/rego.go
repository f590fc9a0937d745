package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/topdown"
	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
)

// Query is what spanwatch evaluates in every policy: a set of alert
// objects, {"labels": {...}, "annotations": {...}}. Each object's labels
// must include alertname; the alert is firing for as long as the policy
// returns it.
const Query = "data.spanwatch.alerts"

// ErrTimeout is returned (wrapped) by Policy.Eval when a policy runs longer
// than its time limit.
var ErrTimeout = errors.New("policy evaluation timed out")

// A Policy is one Rego module with its data, compiled and prepared once.
type Policy struct {
	// Name defaults to the file's base name without ".rego".
	Name string
	// File is the Rego file's path as resolved; DataFiles likewise.
	File      string
	DataFiles []string
	// Over is the range the policy's input series cover, as on YAML
	// rules: input.series and input.by_span hold each series' counts and
	// quantiles over it (default DefaultOver).
	Over time.Duration
	// For and KeepFiringFor work as on YAML rules.
	For           time.Duration
	KeepFiringFor time.Duration
	Pos           section.Pos

	files []string
	query rego.PreparedEvalQuery
	// needs is what the policy reads of input.series and input.by_span.
	needs inputNeeds
}

type policySpec struct {
	pos           section.Pos
	file          string
	fileNode      *yaml.Node
	data          []string
	name          string
	over          time.Duration
	forDur        time.Duration
	keepFiringFor time.Duration
}

// deniedBuiltin says why a builtin is refused in a policy, or "" when it is
// allowed.
func deniedBuiltin(name string) string {
	switch {
	case name == "http.send":
		return "it makes HTTP requests"
	case strings.HasPrefix(name, "net."):
		return "it reaches the network (DNS lookups) or is one of the net.* builtins spanwatch refuses"
	case name == "opa.runtime":
		return "it exposes the agent's environment and configuration"
	case name == "graph.reachable_paths":
		return "the paths it lists grow exponentially with the graph, in one step that no time or memory limit can stop (graph.reachable lists the nodes)"
	}
	return ""
}

// sandboxCapabilities are this OPA's builtins minus the denied ones, with no
// network access allowed: compiling a module that calls a denied builtin
// fails even if the pre-compile scan missed it.
func sandboxCapabilities() *ast.Capabilities {
	c := ast.CapabilitiesForThisVersion()
	kept := c.Builtins[:0]
	for _, b := range c.Builtins {
		if deniedBuiltin(b.Name) == "" {
			kept = append(kept, b)
		}
	}
	c.Builtins = kept
	c.AllowNet = []string{}
	return c
}

var sandboxCaps = sandboxCapabilities()

const sandboxWhy = "policies run inside the agent on every snapshot and must not reach outside it; compute from input and data instead"

func compilePolicy(ctx context.Context, spec policySpec, rd *fileReader) (*Policy, section.ErrorList) {
	p := &Policy{Pos: spec.pos, Over: spec.over, For: spec.forDur, KeepFiringFor: spec.keepFiringFor}
	p.File = rd.path(spec.file)
	p.Name = spec.name
	if p.Name == "" {
		p.Name = strings.TrimSuffix(filepath.Base(spec.file), ".rego")
	}
	at := func(msg string, a ...any) section.ErrorList {
		return section.ErrorList{{File: spec.pos.File, Line: spec.pos.Line, Col: spec.pos.Col, Msg: fmt.Sprintf(msg, a...)}}
	}
	src, err := rd.read(p.File)
	if err != nil {
		return nil, at("policy %s: %v", spec.file, unwrapPathError(err))
	}
	p.files = append(p.files, p.File)

	mod, err := ast.ParseModuleWithOpts(p.File, string(src), ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		return nil, astErrors(p.File, err)
	}
	if mod == nil {
		return nil, section.ErrorList{{File: p.File, Msg: "empty policy: want a package spanwatch with an alerts rule"}}
	}
	if errs := scanDenied(p.File, mod); len(errs) > 0 {
		return nil, errs
	}
	if got := mod.Package.Path.String(); got != "data.spanwatch" {
		loc := mod.Package.Location
		return nil, section.ErrorList{{File: p.File, Line: loc.Row, Col: loc.Col, Msg: fmt.Sprintf("package is %s: a spanwatch policy is package spanwatch and defines alerts (a set of {labels, annotations} objects)", strings.TrimPrefix(got, "data."))}}
	}
	hasAlerts := false
	for _, r := range mod.Rules {
		if r.Head.Name == "alerts" || (len(r.Head.Reference) > 0 && r.Head.Reference[0].Value.Compare(ast.Var("alerts")) == 0) {
			hasAlerts = true
		}
	}
	if !hasAlerts {
		return nil, section.ErrorList{{File: p.File, Line: mod.Package.Location.Row, Col: mod.Package.Location.Col, Msg: "policy defines no alerts rule: want e.g. alerts contains {\"labels\": {\"alertname\": \"X\"}} if { ... }"}}
	}

	foldConstants(mod)

	data := map[string]any{}
	for _, df := range spec.data {
		full := rd.path(df)
		p.DataFiles = append(p.DataFiles, full)
		p.files = append(p.files, full)
		raw, err := rd.read(full)
		if err != nil {
			return nil, at("policy %s: data %s: %v", spec.file, df, unwrapPathError(err))
		}
		obj, err := decodeData(full, raw)
		if err != nil {
			return nil, section.ErrorList{{File: full, Msg: err.Error()}}
		}
		for k, v := range obj {
			if _, dup := data[k]; dup {
				return nil, section.ErrorList{{File: full, Msg: fmt.Sprintf("data key %q is also set by an earlier data file of policy %s", k, p.Name)}}
			}
			data[k] = v
		}
	}

	r := rego.New(
		rego.Query(Query),
		rego.ParsedModule(mod),
		rego.Store(inmem.NewFromObject(data)),
		rego.Capabilities(sandboxCaps),
		rego.SetRegoVersion(ast.RegoV1),
	)
	pq, err := r.PrepareForEval(ctx)
	if err != nil {
		return nil, astErrors(p.File, err)
	}
	p.query = pq
	// The prefilter reads the module as OPA compiles it: in evaluation
	// order, with every expression's operands made explicit.
	c := ast.NewCompiler().WithCapabilities(sandboxCaps)
	if c.Compile(map[string]*ast.Module{p.File: mod.Copy()}); c.Failed() {
		return nil, astErrors(p.File, c.Errors)
	}
	p.needs = analyzeInput(c.Modules[p.File], data)
	return p, nil
}

// Prefilter describes what the policy's input holds when a Batch makes
// it: "all series", "the series passing N guard(s) in one of M
// iteration(s)" or "no series", and likewise for by_span. For tests and
// tools that explain a policy's cost.
func (p *Policy) Prefilter() string {
	var b strings.Builder
	switch p.needs.series {
	case needNone:
		b.WriteString("series: none")
	case needAll:
		b.WriteString("series: all")
	default:
		b.WriteString("series: those passing")
		for i, gs := range p.needs.iters {
			if i > 0 {
				b.WriteString(" or")
			}
			for j, g := range gs {
				if j > 0 {
					b.WriteString(" and")
				}
				fmt.Fprintf(&b, " %s %s %v", g.field.name, [...]string{">", ">=", "<", "<=", "==", "!="}[g.op], g.val)
			}
		}
	}
	switch p.needs.bySpan {
	case needNone:
		b.WriteString("; by_span: none")
	case needAll:
		b.WriteString("; by_span: all")
	default:
		spans := slices.Clone(p.needs.spans)
		slices.Sort(spans)
		fmt.Fprintf(&b, "; by_span: %s", strings.Join(spans, ", "))
	}
	return b.String()
}

func unwrapPathError(err error) error {
	var pe interface{ Unwrap() error }
	if errors.As(err, &pe) && strings.Contains(err.Error(), "no such file") {
		return errors.New("no such file")
	}
	return err
}

// scanDenied finds calls to denied builtins before compiling, so the error
// says why instead of "undefined function".
func scanDenied(file string, mod *ast.Module) section.ErrorList {
	var errs section.ErrorList
	report := func(ref ast.Ref, loc *ast.Location) {
		name := ref.String()
		why := deniedBuiltin(name)
		if why == "" {
			return
		}
		e := &section.Error{File: file, Msg: fmt.Sprintf("%s is not allowed in a spanwatch policy: %s; %s", name, why, sandboxWhy)}
		if loc != nil {
			e.Line, e.Col = loc.Row, loc.Col
		}
		errs = append(errs, e)
	}
	ast.WalkExprs(mod, func(e *ast.Expr) bool {
		if e.IsCall() {
			report(e.Operator(), e.Location)
		}
		return false
	})
	ast.WalkTerms(mod, func(t *ast.Term) bool {
		if c, ok := t.Value.(ast.Call); ok && len(c) > 0 {
			if ref, ok := c[0].Value.(ast.Ref); ok {
				report(ref, t.Location)
			}
		}
		return false
	})
	sort.SliceStable(errs, func(i, j int) bool {
		if errs[i].Line != errs[j].Line {
			return errs[i].Line < errs[j].Line
		}
		return errs[i].Col < errs[j].Col
	})
	return errs
}

// astErrors turns OPA parse and compile errors into positioned Errors.
func astErrors(file string, err error) section.ErrorList {
	var aes ast.Errors
	if errors.As(err, &aes) && len(aes) > 0 {
		var out section.ErrorList
		for _, ae := range aes {
			e := &section.Error{File: file, Msg: ae.Message}
			if ae.Location != nil {
				if ae.Location.File != "" {
					e.File = ae.Location.File
				}
				e.Line, e.Col = ae.Location.Row, ae.Location.Col
			}
			if strings.Contains(ae.Message, "keyword is required") {
				e.Msg += " (spanwatch policies are Rego v1; run \"opa fmt --v0-v1\" on a v0 policy)"
			}
			if strings.HasPrefix(ae.Message, "undefined function ") {
				if why := deniedBuiltin(strings.TrimPrefix(ae.Message, "undefined function ")); why != "" {
					e.Msg += " (refused by spanwatch's sandbox: " + why + ")"
				}
			}
			out = append(out, e)
		}
		return out
	}
	return section.ErrorList{{File: file, Msg: err.Error()}}
}

// decodeData reads a JSON or YAML data file; its top level must be an
// object, merged into the policy's data.
func decodeData(name string, raw []byte) (map[string]any, error) {
	var v any
	switch strings.ToLower(filepath.Ext(name)) {
	case ".json":
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("bad JSON: %v", err)
		}
	case ".yaml", ".yml":
		var n yaml.Node
		if err := yaml.Unmarshal(raw, &n); err != nil {
			return nil, fmt.Errorf("bad YAML: %v", strings.TrimPrefix(err.Error(), "yaml: "))
		}
		if n.Kind != 0 {
			if err := section.CheckTree(name, &n); err != nil {
				return nil, errors.New(err.Msg)
			}
		}
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("bad YAML: %v", strings.TrimPrefix(err.Error(), "yaml: "))
		}
		// Through JSON, so the store sees only JSON types.
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("data is not JSON-compatible: %v", err)
		}
		v = nil
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("data file must be .json, .yaml or .yml")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("data file's top level must be an object")
	}
	return obj, nil
}

// A PolicyAlert is one element of a policy's alerts set.
type PolicyAlert struct {
	Labels      map[string]string
	Annotations map[string]string
}

// Eval evaluates the policy over an input made by Input, under the
// context's deadline. A policy that exceeds the deadline returns an error
// wrapping ErrTimeout; one cut off at its memory bound (a builtin that
// would pass WithMemoryLimit's bound, or a WatchHeap that saw the heap
// pass it) an error wrapping ErrMemory.
func (p *Policy) Eval(ctx context.Context, input InputValue) ([]PolicyAlert, error) {
	// The result stays an AST term: converting it to Go values and then
	// to strings cost more than the evaluation when a policy fires for
	// many series.
	rs, err := p.query.Eval(ctx, rego.EvalParsedInput(input.v), rego.EvalGenerateJSON(keepTerm))
	if err != nil {
		switch {
		case errors.Is(err, ErrMemory):
			var te *topdown.Error
			if errors.As(err, &te) {
				return nil, fmt.Errorf("policy %s: %w: %s", p.Name, ErrMemory, te.Message)
			}
			return nil, fmt.Errorf("policy %s: %w", p.Name, ErrMemory)
		case errors.Is(context.Cause(ctx), ErrMemory):
			return nil, fmt.Errorf("policy %s: %w", p.Name, ErrHeapGrew)
		}
		if ctx.Err() != nil || topdown.IsCancel(err) {
			return nil, fmt.Errorf("policy %s: %w", p.Name, ErrTimeout)
		}
		return nil, fmt.Errorf("policy %s: %w", p.Name, err)
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return nil, nil // undefined: no alerts
	}
	t, _ := rs[0].Expressions[0].Value.(*ast.Term)
	var items []*ast.Term
	switch v := t.Value.(type) {
	case ast.Set:
		items = v.Slice()
	case *ast.Array:
		v.Foreach(func(x *ast.Term) { items = append(items, x) })
	default:
		return nil, fmt.Errorf("policy %s: alerts must be a set of objects, got %s", p.Name, ast.ValueName(t.Value))
	}
	out := make([]PolicyAlert, 0, len(items))
	for i, it := range items {
		obj, ok := it.Value.(ast.Object)
		if !ok {
			return nil, fmt.Errorf("policy %s: alert %d is %s, want an object with labels and annotations", p.Name, i, ast.ValueName(it.Value))
		}
		var a PolicyAlert
		err := obj.Iter(func(k, v *ast.Term) error {
			key, _ := k.Value.(ast.String)
			var err error
			switch key {
			case "labels":
				a.Labels, err = stringMap(v)
			case "annotations":
				a.Annotations, err = stringMap(v)
			default:
				return fmt.Errorf("unknown key %v (want labels, annotations)", k)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("policy %s: alert %d: %w", p.Name, i, err)
		}
		if a.Labels["alertname"] == "" {
			return nil, fmt.Errorf("policy %s: alert %d has no alertname label", p.Name, i)
		}
		out = append(out, a)
	}
	return out, nil
}

func keepTerm(t *ast.Term, _ *rego.EvalContext) (any, error) { return t, nil }

func stringMap(t *ast.Term) (map[string]string, error) {
	obj, ok := t.Value.(ast.Object)
	if !ok {
		return nil, fmt.Errorf("want an object, got %s", ast.ValueName(t.Value))
	}
	out := make(map[string]string, obj.Len())
	err := obj.Iter(func(k, v *ast.Term) error {
		ks, ok := k.Value.(ast.String)
		if !ok {
			return fmt.Errorf("keys must be strings, got %v", k)
		}
		switch x := v.Value.(type) {
		case ast.String:
			out[string(ks)] = string(x)
		case ast.Number:
			out[string(ks)] = string(x)
		case ast.Boolean:
			out[string(ks)] = strconv.FormatBool(bool(x))
		default:
			return fmt.Errorf("%s: values must be strings, got %s", ks, ast.ValueName(v.Value))
		}
		return nil
	})
	return out, err
}
