package notify

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/spanwatch/spanwatch/alert"
)

// echoReceiver refuses every request (400) with a body that echoes it, as
// some receivers do: its URL (query included), its credentials and
// signature headers, raw and JSON-escaped, after pad bytes of filler (to
// put the secrets across the 512-byte excerpt's end), and what it knows
// besides (a shared HMAC key it prints in a debug message).
func echoReceiver(t *testing.T, pad int, knows string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		echo := map[string]string{
			"url":           r.URL.String(),
			"authorization": r.Header.Get("Authorization"),
			"timestamp":     r.Header.Get(TimestampHeader),
		}
		j, _ := json.Marshal(echo)
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, "%sbad request %s %s: %s (key %s)", strings.Repeat(".", pad), r.URL.String(), r.Header.Get("Authorization"), j, knows)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestEchoedSecretsRedacted sends to a real receiver that echoes its
// Authorization header and URL in its 4xx body, for each kind of
// credential: the receiver got the secrets, and none of them reaches the
// logs, the last error, the dead letter stored in the outbox or served by
// DeadLetters, or spanwatch notify test's response.
func TestEchoedSecretsRedacted(t *testing.T) {
	dir := t.TempDir()
	token := writeFile(t, dir, "token", "tok/BEARER+SECRET=\n")
	password := writeFile(t, dir, "password", "PASS\"SECRET\n")
	hmacKey := writeFile(t, dir, "hmac", "HMAC-SECRET-KEY\n")
	for _, tc := range []struct {
		name, extra, query string
		secrets            []string
		pad                int
		knows              string
	}{
		{"bearer", "bearer_token_file: " + token, "", []string{"tok/BEARER+SECRET="}, 0, ""},
		{"bearer across the excerpt's end", "bearer_token_file: " + token, "", []string{"tok/BEARER+SECRET=", "tok/"}, 480, ""},
		{"basic auth", "basic_auth: {username: spanwatch, password_file: " + password + "}", "", []string{"c3BhbndhdGNoOlBBU1MiU0VDUkVU", "PASS\"SECRET", "PASS\\\"SECRET"}, 0, "PASS\"SECRET"},
		{"hmac and a query secret", "hmac_secret_file: " + hmacKey, "?api_key=QUERY%2FSECRET&team=ops", []string{"HMAC-SECRET-KEY", "QUERY/SECRET", "QUERY%2FSECRET"}, 0, "HMAC-SECRET-KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := echoReceiver(t, tc.pad, tc.knows)
			var logs syncBuffer
			c := webhookConfig(t, srv.URL+"/hook"+tc.query, t.TempDir(), tc.extra)
			d, err := New(c, Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			notifyOK(t, d, mkAlert("a", 1, alert.StateFiring, time.Now()))
			var dead []DeadLetter
			waitFor(t, 10*time.Second, "a dead letter", func() bool {
				dead, err = d.DeadLetters()
				return err == nil && len(dead) > 0
			})
			// The receiver really echoed them: the test can fail.
			s := c.Webhooks[0].sendTestRaw(t)
			if !strings.Contains(s, tc.secrets[0]) && !strings.Contains(s, jsonEscape(tc.secrets[0])) {
				t.Fatalf("the receiver did not echo %q: %s", tc.secrets[0], s)
			}
			_, resp, err := SendTest(t.Context(), c, "test")
			all := logs.String() + d.Stats().Webhooks[0].LastError + resp.Body + dead[0].Error + string(dead[0].Body)
			if resp.Err != nil {
				all += resp.Err.Error()
			}
			if err != nil {
				all += err.Error()
			}
			if !strings.Contains(dead[0].Error, "bad request") {
				t.Errorf("dead letter error %q: the receiver's answer is gone", dead[0].Error)
			}
			if tc.pad == 0 && !strings.Contains(all, Redacted) {
				t.Errorf("nothing was redacted: %s", all)
			}
			for _, sec := range tc.secrets {
				if strings.Contains(all, sec) {
					t.Errorf("secret %q leaked:\n%s", sec, all)
				}
			}
		})
	}
}

func jsonEscape(s string) string {
	j, _ := json.Marshal(s)
	return string(j[1 : len(j)-1])
}

// sendTestRaw makes one attempt without redaction, to see what the
// receiver answers.
func (w *Webhook) sendTestRaw(t *testing.T) string {
	s, err := newSender(w)
	if err != nil {
		t.Fatal(err)
	}
	target, _ := s.url()
	req, _ := http.NewRequest(http.MethodPost, target, strings.NewReader("{}"))
	if err := s.authorize(req, []byte("{}"), time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}

// TestDeadLettersRedactedWhenServed stores a dead letter the way an agent
// without redaction did (the receiver's answer as it came, the token in
// it) and reads it back: DeadLetters and RedactDeadLetters serve it
// without the secret, the outbox keeps it as stored.
func TestDeadLettersRedactedWhenServed(t *testing.T) {
	dir := t.TempDir()
	token := writeFile(t, dir, "token", "OLD-STORED-TOKEN\n")
	c := webhookConfig(t, "http://127.0.0.1:1/hook?key=STORED-QUERY-KEY", dir, "bearer_token_file: "+token)
	d := mustNew(t, c)
	raw := deadLetter{queued: queued{ID: "x", Group: "g", Alerts: 1, Body: []byte(`{"echo":"Bearer OLD-STORED-TOKEN"}`)},
		Reason: ReasonHTTP4xx, Error: `post http://127.0.0.1:1/hook?key=xxxxx: 400 Bad Request: "Authorization: Bearer OLD-STORED-TOKEN key=STORED-QUERY-KEY"`, At: time.Now()}
	v, _ := json.Marshal(raw)
	err := d.db.Update(func(tx *bolt.Tx) error {
		b, err := sub(tx, bucketDead, "test")
		if err != nil {
			return err
		}
		return b.Put(binary.BigEndian.AppendUint64(nil, 1), v)
	})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := d.DeadLetters()
	if err != nil || len(dead) != 1 {
		t.Fatalf("dead letters %v %+v", err, dead)
	}
	got := dead[0].Error + string(dead[0].Body)
	for _, sec := range []string{"OLD-STORED-TOKEN", "STORED-QUERY-KEY"} {
		if strings.Contains(got, sec) {
			t.Errorf("served dead letter holds %s: %s", sec, got)
		}
	}
	if !json.Valid(dead[0].Body) || !strings.Contains(string(dead[0].Body), Redacted) {
		t.Errorf("body %s", dead[0].Body)
	}
	d.Close()
	// Read offline (spanwatch notify dead-letters), then redacted with the
	// configuration.
	list, err := ReadDeadLetters(filepath.Join(dir, "outbox.db"))
	if err != nil || len(list) != 1 || !strings.Contains(list[0].Error, "OLD-STORED-TOKEN") {
		t.Fatalf("stored letter: %v %+v", err, list)
	}
	c.RedactDeadLetters(list)
	if strings.Contains(list[0].Error, "OLD-STORED-TOKEN") {
		t.Errorf("RedactDeadLetters left the token: %s", list[0].Error)
	}
}
