package notify

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"text/template"
	"text/template/parse"
	"time"

	"github.com/spanwatch/spanwatch/alert"
)

// PayloadVersion is the version of Alertmanager's webhook payload that
// Message follows.
const PayloadVersion = "4"

// Message is Alertmanager's webhook payload, version "4": the body posted by
// format: alertmanager, and the data a format: template executes over.
type Message struct {
	Version           string            `json:"version"`
	GroupKey          string            `json:"groupKey"`
	TruncatedAlerts   uint64            `json:"truncatedAlerts"`
	Receiver          string            `json:"receiver"`
	Status            string            `json:"status"`
	Alerts            []PayloadAlert    `json:"alerts"`
	GroupLabels       map[string]string `json:"groupLabels"`
	CommonLabels      map[string]string `json:"commonLabels"`
	CommonAnnotations map[string]string `json:"commonAnnotations"`
	ExternalURL       string            `json:"externalURL"`
}

// PayloadAlert is one alert in a Message.
type PayloadAlert struct {
	Status       string            `json:"status"`
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL"`
	Fingerprint  string            `json:"fingerprint"`
}

// Firing returns the firing alerts of m, for templates: {{ range .Firing }}.
func (m *Message) Firing() []PayloadAlert { return m.byStatus("firing") }

// Resolved returns the resolved alerts of m.
func (m *Message) Resolved() []PayloadAlert { return m.byStatus("resolved") }

func (m *Message) byStatus(s string) []PayloadAlert {
	var out []PayloadAlert
	for _, a := range m.Alerts {
		if a.Status == s {
			out = append(out, a)
		}
	}
	return out
}

// PostableAlert is the element of the list that Alertmanager's
// POST /api/v2/alerts accepts.
type PostableAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	StartsAt     time.Time         `json:"startsAt,omitzero"`
	EndsAt       time.Time         `json:"endsAt,omitzero"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

// annotations are a's annotations as they are: the detector wrote an
// overrun alert's (summary, stack, trace and span ids, pid, duration,
// budget) once, for every notifier. An alert without any gets an empty
// map, so that the payload's "annotations" is always an object.
func annotations(a *alert.Alert) map[string]string {
	if a.Annotations == nil {
		return map[string]string{}
	}
	return a.Annotations
}

func status(a *alert.Alert) string {
	if a.Resolved() {
		return "resolved"
	}
	return "firing"
}

func fingerprint(a *alert.Alert) string {
	if a.Fingerprint != "" {
		return a.Fingerprint
	}
	return alert.Fingerprint(a.Labels)
}

// buildMessage builds the webhook payload for alerts, which are in the
// order they should appear.
func buildMessage(w *Webhook, externalURL, groupKey string, groupLabels map[string]string, alerts []*alert.Alert) *Message {
	m := &Message{
		Version:           PayloadVersion,
		GroupKey:          groupKey,
		Receiver:          w.Name,
		Status:            "resolved",
		GroupLabels:       groupLabels,
		CommonLabels:      map[string]string{},
		CommonAnnotations: map[string]string{},
		ExternalURL:       externalURL,
		Alerts:            make([]PayloadAlert, 0, len(alerts)),
	}
	if w.MaxAlerts > 0 && len(alerts) > w.MaxAlerts {
		m.TruncatedAlerts = uint64(len(alerts) - w.MaxAlerts)
	}
	for i, a := range alerts {
		st := status(a)
		if st == "firing" {
			m.Status = "firing"
		}
		ann := annotations(a)
		if i == 0 {
			maps.Copy(m.CommonLabels, a.Labels)
			maps.Copy(m.CommonAnnotations, ann)
		} else {
			keepCommon(m.CommonLabels, a.Labels)
			keepCommon(m.CommonAnnotations, ann)
		}
		if m.TruncatedAlerts > 0 && i >= w.MaxAlerts {
			continue
		}
		m.Alerts = append(m.Alerts, PayloadAlert{
			Status:       st,
			Labels:       a.Labels,
			Annotations:  ann,
			StartsAt:     a.StartsAt,
			EndsAt:       a.EndsAt,
			GeneratorURL: a.GeneratorURL,
			Fingerprint:  fingerprint(a),
		})
	}
	return m
}

func keepCommon(common, m map[string]string) {
	for k, v := range common {
		if m[k] != v {
			delete(common, k)
		}
	}
}

// render builds the request body of a notification in w's format.
func render(w *Webhook, tmpl *template.Template, m *Message, alerts []*alert.Alert, now time.Time) ([]byte, error) {
	switch w.Format {
	case FormatAlertmanagerAPI:
		out := make([]PostableAlert, 0, len(alerts))
		for _, a := range alerts {
			p := PostableAlert{
				Labels:       a.Labels,
				Annotations:  annotations(a),
				StartsAt:     a.StartsAt,
				EndsAt:       a.EndsAt,
				GeneratorURL: a.GeneratorURL,
			}
			// A firing alert without endsAt gets Alertmanager's
			// resolve_timeout (repeat_interval re-sends it before that); one
			// with endsAt, such as an overrun alert, ends there.
			if a.Resolved() && p.EndsAt.IsZero() {
				p.EndsAt = now
			}
			out = append(out, p)
		}
		return json.Marshal(out)
	case FormatTemplate:
		b := &limitedBuffer{max: maxTemplateOutput}
		if err := tmpl.Execute(b, m); err != nil {
			return nil, fmt.Errorf("execute template: %w", err)
		}
		return b.Bytes(), nil
	default:
		return json.Marshal(m)
	}
}

// templateFuncs are the functions a webhook template can call besides Go's
// built-ins. json renders a value as JSON, which is how text goes safely into
// a JSON body: {"text": {{ json .CommonAnnotations.summary }}}.
var templateFuncs = template.FuncMap{
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"join":  strings.Join,
	"upper": strings.ToUpper,
	"lower": strings.ToLower,
	"truncate": func(n int, s string) string {
		if len(s) <= n {
			return s
		}
		return s[:n] + "..."
	},
	"sortedKeys": func(m map[string]string) []string {
		ks := make([]string, 0, len(m))
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return ks
	},
}

// parseTemplate parses a webhook template and executes it once over a
// sample message, so that a misspelt field is found when the configuration
// is checked rather than when an alert fires.
func parseTemplate(name, text string) (*template.Template, error) {
	t, err := template.New(name).Option("missingkey=zero").Funcs(templateFuncs).Parse(text)
	if err != nil {
		return nil, fmt.Errorf("parse template: %w", err)
	}
	for _, tt := range t.Templates() {
		if tt.Tree == nil {
			continue
		}
		if err := checkRanges(tt.Tree.Root); err != nil {
			return nil, fmt.Errorf("parse template: %w", err)
		}
	}
	a := SampleAlert(time.Unix(0, 0).UTC())
	w := &Webhook{Name: name}
	if err := t.Execute(&limitedBuffer{max: maxTemplateOutput}, buildMessage(w, "", "sample", map[string]string{}, []*alert.Alert{a})); err != nil {
		return nil, fmt.Errorf("execute template over a sample alert: %w", err)
	}
	return t, nil
}

// maxTemplateOutput bounds a template's output, so a runaway range cannot
// fill memory.
const maxTemplateOutput = 1 << 20

var errTemplateTooLong = fmt.Errorf("output longer than %d bytes", maxTemplateOutput)

type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if l.Len()+len(p) > l.max {
		return 0, errTemplateTooLong
	}
	return l.Buffer.Write(p)
}

// maxRangeCount bounds {{ range N }} over an integer literal: Go templates
// can loop over integers, and a large one would spin for minutes.
const maxRangeCount = 10000

// checkRanges rejects ranges over large integer literals in a template.
func checkRanges(n parse.Node) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := checkRanges(c); err != nil {
				return err
			}
		}
	case *parse.RangeNode:
		if p := n.Pipe; p != nil && len(p.Cmds) == 1 && len(p.Cmds[0].Args) == 1 {
			if num, ok := p.Cmds[0].Args[0].(*parse.NumberNode); ok && (!num.IsInt || num.Int64 > maxRangeCount) {
				return fmt.Errorf("range over %s: at most %d iterations", num.Text, maxRangeCount)
			}
		}
		return errors.Join(checkRanges(n.List), checkRanges(n.ElseList))
	case *parse.IfNode:
		return errors.Join(checkRanges(n.List), checkRanges(n.ElseList))
	case *parse.WithNode:
		return errors.Join(checkRanges(n.List), checkRanges(n.ElseList))
	}
	return nil
}
