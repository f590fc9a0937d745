package notify

import (
	"context"
	"fmt"
	"time"

	"github.com/spanwatch/spanwatch/alert"
)

// SendTest sends one sample alert (SampleAlert) to the webhook named name
// the way a Dispatcher would — same body format, credentials, signature and
// TLS settings — but directly, without the outbox, grouping or retries. It
// returns the body it sent and what the receiver answered; Response.Err is
// nil only for a 2xx answer.
func SendTest(ctx context.Context, cfg *Config, name string) (body []byte, resp Response, err error) {
	w, ok := cfg.Webhook(name)
	if !ok {
		names := make([]string, 0, len(cfg.Webhooks))
		for _, w := range cfg.Webhooks {
			names = append(names, w.Name)
		}
		return nil, Response{}, fmt.Errorf("no webhook named %q in %s (configured: %v)", name, cfg.File, names)
	}
	s, err := newSender(w)
	if err != nil {
		return nil, Response{}, err
	}
	now := time.Now()
	a := SampleAlert(now)
	h := &hook{w: w}
	gk, labels := h.groupKey(a)
	alerts := []*alert.Alert{a}
	var tmpl = h.tmpl
	if w.Format == FormatTemplate {
		if tmpl, err = parseTemplate(w.Name, w.Template); err != nil {
			return nil, Response{}, fmt.Errorf("webhook %s: %w", w.Name, err)
		}
	}
	body, err = render(w, tmpl, buildMessage(w, cfg.Routing.ExternalURL, gk, labels, alerts), alerts, now)
	if err != nil {
		return nil, Response{}, fmt.Errorf("webhook %s: render: %w", w.Name, err)
	}
	return body, s.send(ctx, body, idempotencyKey(w.Name, gk, alerts, now), now), nil
}
