// Package crashpoint kills the process at named points, for the
// crash-only test (cmd/spanwatch's TestCrashOnly): built with the tag
// crashtest, Hit(name) sends the process SIGKILL at the Nth time the
// point named by $SPANWATCH_CRASH_AT ("name:N") is reached. Without the
// tag (every build but the test's), Hit is an empty function the
// compiler removes.
//
// The points: snapshot (the collector's maps read, before evaluation),
// evaluate (alerts decided, before they are saved and notified),
// outbox_write (inside the transaction that stores alerts, before it
// commits), delivery (a notification delivered, before it leaves the
// queue) and reload (every section prepared, before the commit).
package crashpoint
