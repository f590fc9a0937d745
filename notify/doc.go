// Package notify delivers alerts to webhooks without losing them.
//
// A Dispatcher implements alert.Notifier. Notify writes the alerts to a
// durable outbox (a bbolt file) and returns; background work groups them the
// way Alertmanager's dispatcher does (group_by, group_wait, group_interval,
// repeat_interval, send_resolved), renders each group's notification, writes
// it to the outbox, and one worker per webhook delivers the queued
// notifications in order. A notification leaves the outbox only after the
// receiver answered 2xx or failed permanently (another 4xx, which is
// counted and logged with the response body). 5xx, 429, timeouts and
// connection errors are retried with exponential backoff and jitter,
// honouring Retry-After. A restart, even after SIGKILL, resumes where the
// outbox left off, so delivery is at least once; each request carries an
// idempotency key (X-Spanwatch-Idempotency-Key) that stays the same across
// retries of the same notification, so a receiver can drop duplicates.
//
// Three body formats are supported: Alertmanager's webhook payload
// (version "4"), so every receiver written for Alertmanager works; a direct
// push to a real Alertmanager (POST /api/v2/alerts with postable alerts);
// and a Go text/template over the same data as the webhook payload.
//
// Requests are signed when the webhook has an hmac_secret_file: the header
// X-Spanwatch-Timestamp holds the Unix time of the attempt in seconds, and
// X-Spanwatch-Signature holds "sha256=" followed by the lower-case hex
// HMAC-SHA256, keyed with the secret file's content (trailing newlines
// removed), of the timestamp, a '.', and the exact request body. Receivers
// should recompute it, compare in constant time, and reject a timestamp
// more than a few minutes away from their clock, so a captured request
// cannot be replayed later. See Verify and examples/webhook-receiver.
//
// Secrets (credentials, signing keys, URL user info and query strings) never
// appear in errors or logs: every URL is redacted first. A receiver's
// answer, which may echo the request, has the webhook's own secrets
// replaced by "<redacted>" (Redacted) before errors, logs and the outbox's
// dead letters keep it: the bearer token, the basic-auth password and its
// base64 user:password, the HMAC key, the URL's password and query values,
// and a url_file URL's path, each also in its URL-escaped, JSON-escaped
// and base64 forms (values shorter than 4 bytes are no secret and are left
// alone). Dead letters are redacted again when served
// (Config.RedactDeadLetters), so letters stored earlier come out clean.
//
// Configuration lives in two sections of spanwatch's one configuration
// file, decoded strictly by Decode, which package config calls
// (config/schema.json documents them): webhooks:, a list of receivers,
// and routing:, whose outbox: key sets the
// outbox file (default /var/lib/spanwatch/outbox.db) and its bound
// (max_entries, default 10000). The bound counts stored alerts plus queued
// notifications; alerts beyond it are refused with ErrOutboxFull and counted,
// never dropped silently.
//
// The outbox is a bbolt file with one bucket per webhook for the alerts of
// its groups, the last notification of each group (Alertmanager's
// notification log), the delivery queue, and dead letters: notifications
// refused permanently or given up after max_age or max_attempts, kept (the
// last 256) for inspection. It also keeps what the agent saves to survive a
// restart (SaveState, LoadState: the detector's alert state).
//
// A damaged outbox never takes the process down. bbolt reads its file
// through a memory map with unchecked pointers, and its own check runs on
// a goroutine of its own, where a fault kills the process; so the file is
// first verified with bounds-checked reads (internal/boltcheck). A file
// that fails, or that bbolt refuses, is renamed aside
// (path.corrupt-TIMESTAMP, kept as it was), a fresh outbox is started, and
// every record that can still be read from the damaged copy is carried
// over (alerts, notification log, queued notifications in order, dead
// letters); all of it is logged and reported in Stats (MovedAside,
// Damage, Salvaged, Unreadable). ReadDeadLetters verifies the same way and
// lists what it can read from a damaged file.
//
// Writes that fail (a full disk, an I/O error) lose nothing: alerts are
// held in memory, in order, up to Options.MaxHeld (refused and counted
// past it), and written with backoff until the outbox takes them; a group
// whose notification could not be queued tries again with backoff, not a
// group_interval later. An alert that fired and resolved while held is
// delivered firing, then resolved.
//
// Reload applies a changed configuration in place, as a restart on the same
// outbox would (stored alerts are regrouped under the new group_by and
// match), and keeps what delivery was doing: each group's timer, and the
// backoff of a notification being retried (for a webhook that keeps its
// name and destination), so a reload, however often, neither resends early
// nor restarts a backoff; Flush sends what is due now and waits for the queues to drain;
// Close lets an attempt under way finish and leaves the rest in the outbox.
// Stats returns the dispatcher's counters; NewCollector exports them to
// Prometheus.
package notify
