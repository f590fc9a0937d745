// Package lint checks the repository's own Go source for house rules the
// compiler does not enforce. Its tests run the checks over the whole module
// in the normal `go test ./...`, so a change that breaks a rule fails there.
//
// The one check today is the log style (STYLE.md, house rule 3): every
// log/slog call passes a static snake_case event name as its message
// ("overrun_read_failed") and snake_case string literals as its keys,
// each key spelled the one way the tree spells it: "error" for an error,
// never "err".
package lint
