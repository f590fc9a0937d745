// Package glob is the one glob syntax of spanwatch: rule files (span,
// cgroup, namespace, pod, container, process, unit matchers and budgets),
// "spanwatch stacks --span" and "spanwatch probes --filter" all match with
// Compile.
//
// A star ('*') matches any run of characters, '/' included, so
// "GET /api/*" matches "GET /api/v1/users" and "/kubepods*" any cgroup
// below /kubepods. A question mark ('?') matches one character (a UTF-8
// character, not a byte). A backslash makes the next character literal
// ("\*" is a star). A leading '!' negates the whole pattern
// ("!istio-proxy"). A pattern without these matches exactly itself.
//
// Unlike path.Match and shell globs there are no character classes:
// '[' and ']' are ordinary characters, so span names like "GET [id]" need
// no escaping. Matching runs in O(len(pattern) * len(s)), whatever the
// pattern.
package glob
