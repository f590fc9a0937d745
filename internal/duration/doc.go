// Package duration is the one duration syntax of spanwatch: every rule file
// section (budgets, rules, webhooks, routing, collector, exporter), every
// rule test file and every command-line flag reads durations with Parse.
//
// A duration is a sequence of decimal numbers, each with a unit: ns, us (or
// µs), ms, s, m, h, d (24h), w (7d), y (365d), for example 250ms, 1.5s,
// 1h30m, 1d, 2w. "0" needs no unit. It is Go's time.ParseDuration syntax
// with Prometheus's and Alertmanager's day, week and year units added, so a
// value copied from either works here; negative durations are refused.
package duration
