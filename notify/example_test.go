package notify_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/spanwatch/spanwatch/notify"
)

// A receiver checks a request's signature with Verify before it trusts
// the body.
func ExampleVerify() {
	body := []byte(`{"version":"4","status":"firing"}`)
	ts := time.Now().Unix()
	h := http.Header{}
	h.Set(notify.TimestampHeader, fmt.Sprint(ts))
	h.Set(notify.SignatureHeader, notify.Sign([]byte("key"), ts, body))

	fmt.Println(notify.Verify([]byte("key"), h, body, time.Now(), notify.DefaultSignatureTolerance))
	fmt.Println(notify.Verify([]byte("key"), h, []byte(`{"status":"resolved"}`), time.Now(), notify.DefaultSignatureTolerance))
	fmt.Println(notify.Verify([]byte("key"), h, body, time.Now().Add(time.Hour), notify.DefaultSignatureTolerance))
	// Output:
	// <nil>
	// signature does not match
	// timestamp outside tolerance (replayed or clock skew)
}

func ExampleSign() {
	fmt.Println(notify.Sign([]byte("key"), 1700000000, []byte(`{"a":1}`)))
	// Output:
	// sha256=a438e398bfafc57e4396bb7fc2304422f0f768e965d073ca313cb52e22e6ad03
}

func ExampleParseConfigFile() {
	cfg, err := notify.ParseConfigFile("spanwatch.yaml", []byte(`
webhooks:
  - name: ops
    url: https://alerts.example/hook
    group_by: [alertname, span]
    repeat_interval: 1d
  - name: am
    url: http://127.0.0.1:9093/api/v2/alerts
    format: alertmanager-api
routing:
  outbox: {path: /var/lib/spanwatch/outbox.db, max_entries: 5000}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, w := range cfg.Webhooks {
		fmt.Println(w.Name, w.Format, w.GroupBy, w.GroupWait, w.GroupInterval, w.RepeatInterval, w.SendResolved)
	}
	_, err = notify.ParseConfigFile("spanwatch.yaml", []byte("webhooks:\n  - name: ops\n    url: https://x/\n    timeot: 5s\n"))
	fmt.Println(err)
	// Output:
	// ops alertmanager [alertname span] 30s 5m0s 24h0m0s true
	// am alertmanager-api [alertname] 30s 5m0s 1m0s true
	// spanwatch.yaml:4:5: unknown key "timeot" (known keys: basic_auth, bearer_token_file, content_type, format, group_by, group_interval, group_wait, hmac_secret_file, match, max_age, max_alerts, max_attempts, max_backoff, min_backoff, name, repeat_interval, send_resolved, template, timeout, tls, url, url_file)
}
