package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spanwatch/spanwatch/internal/duration"
	"github.com/spanwatch/spanwatch/notify"
)

func init() {
	register(&command{
		name:    "notify",
		args:    "test --config FILE --webhook NAME | dead-letters --config FILE",
		summary: "send a sample alert to a configured webhook; list the outbox's dead letters",
		help: `
notify test sends one sample alert (a firing overrun alert with a stack and a
trace id) to the webhook named by --webhook, exactly the way the agent would:
the same body format (alertmanager, alertmanager-api or template), the same
credentials, HMAC signature and TLS settings from the configuration file. It
bypasses grouping, the outbox and retries, and reports the receiver's answer:
the HTTP status and the start of the response body. The exit status is 0 for
a 2xx answer and 1 otherwise.

The sample alert is labelled alertname=SpanwatchTest and
source=spanwatch-notify-test, so receivers can tell it from a real one.

notify dead-letters prints the notifications the outbox gave up on (refused
by their receiver, expired, or impossible to render), one JSON object per
line, oldest first, with the receiver's answer and the body. It reads the
outbox file, which a running agent holds locked: ask the agent's listener
instead (GET /api/dead-letters). A damaged file is read as far as it can
be: the dead letters that can still be read are printed, then the damage
is reported and the command exits 1 (the agent moves such a file aside and
salvages it at its next start).

Examples:
  spanwatch notify test --config /etc/spanwatch/spanwatch.yaml --webhook ops
  spanwatch notify test --config spanwatch.yaml --webhook ops --show-body
  spanwatch notify dead-letters --config spanwatch.yaml | jq .error`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			config := fs.String("config", "", "the configuration `FILE` holding the webhooks: section")
			webhook := fs.String("webhook", "", "the `NAME` of the webhook to test")
			timeout := duration.Flag(fs, "timeout", 0, "override the webhook's timeout with `DURATION` (0: use the configured one)")
			showBody := fs.Bool("show-body", false, "print the request body that was sent")
			return func(ctx context.Context, args []string) error {
				if len(args) == 0 || (args[0] != "test" && args[0] != "dead-letters") {
					return usageErrorf("expected the subcommand \"test\" or \"dead-letters\"")
				}
				if len(args) > 1 {
					return usageErrorf("unexpected arguments %q", args[1:])
				}
				if args[0] == "dead-letters" {
					if *config == "" {
						return usageErrorf("--config is required")
					}
					return printDeadLetters(os.Stdout, *config)
				}
				if *config == "" || *webhook == "" {
					return usageErrorf("--config and --webhook are required")
				}
				return notifyTest(ctx, os.Stdout, *config, *webhook, *timeout, *showBody)
			}
		},
	})
}

func notifyTest(ctx context.Context, out io.Writer, file, name string, timeout time.Duration, showBody bool) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	cfg, err := notify.ParseConfigFile(file, data)
	if err != nil {
		return err
	}
	w, ok := cfg.Webhook(name)
	if !ok {
		var names []string
		for _, w := range cfg.Webhooks {
			names = append(names, w.Name)
		}
		if len(names) == 0 {
			return fmt.Errorf("%s has no webhooks: section", file)
		}
		return fmt.Errorf("%s has no webhook named %q (it has: %s)", file, name, strings.Join(names, ", "))
	}
	if timeout > 0 {
		w.Timeout = notify.Duration(timeout)
	}
	target := notify.RedactURL(w.URL)
	if w.URLFile != "" {
		target = "(url from " + w.URLFile + ")"
	}
	var how []string
	how = append(how, "format "+string(w.Format))
	if w.HMACSecretFile != "" {
		how = append(how, "signed")
	}
	switch {
	case w.BearerTokenFile != "":
		how = append(how, "bearer token")
	case w.BasicAuth != nil:
		how = append(how, "basic auth as "+w.BasicAuth.Username)
	}
	if w.TLS != nil {
		how = append(how, "custom TLS")
	}
	fmt.Fprintf(out, "webhook %s: POST %s (%s, timeout %s)\n", w.Name, target, strings.Join(how, ", "), w.Timeout)
	start := time.Now()
	body, resp, err := notify.SendTest(ctx, cfg, name)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "sent %d bytes: sample alert SpanwatchTest (firing, overrun with stack and trace id)\n", len(body))
	if showBody {
		fmt.Fprintf(out, "--- request body ---\n%s\n--- end ---\n", body)
	}
	elapsed := time.Since(start).Round(time.Millisecond)
	if resp.StatusCode == 0 {
		return fmt.Errorf("no answer after %s (%s): %w", elapsed, resp.Reason, resp.Err)
	}
	fmt.Fprintf(out, "receiver answered %d in %s\n", resp.StatusCode, elapsed)
	if b := strings.TrimSpace(resp.Body); b != "" {
		fmt.Fprintf(out, "body: %s\n", b)
	}
	if resp.Err != nil {
		what := "permanent failure: the agent would not retry it"
		if resp.Retry {
			what = "the agent would retry it"
		}
		return fmt.Errorf("receiver refused the alert (%s; %s)", resp.Reason, what)
	}
	return nil
}

// printDeadLetters prints the dead letters of the outbox the configuration
// file names, one JSON object per line.
func printDeadLetters(out io.Writer, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	cfg, err := notify.ParseConfigFile(file, data)
	if err != nil {
		return err
	}
	list, err := notify.ReadDeadLetters(cfg.Routing.Outbox.Path)
	if err != nil && !errors.Is(err, notify.ErrOutboxDamaged) {
		return err
	}
	cfg.RedactDeadLetters(list)
	// From a damaged outbox: what could be read, then the error.
	enc := json.NewEncoder(out)
	for _, dl := range list {
		if err := enc.Encode(dl); err != nil {
			return err
		}
	}
	return err
}
