// Package config owns spanwatch's configuration file: it decodes and
// validates the whole file, the way the agent runs it, and reloads it.
//
// Load reads the file once, splits its top level once (sections, in
// config.go: one line a section) and hands each section's value to the
// decoder of the package that owns the section's types: budgets:,
// rules:, policies:, external_labels: and policy_limits: to package
// policy (policy.Sections), webhooks: and routing: to package notify
// (notify.Decode), metrics: to package metrics, the lists of sources: to
// internal/usdt and internal/tpsource (sourceSections: one line a kind of
// source), and keeps collector:, listener: and external_url: itself. Every
// decoder reports into one section.Decoder, with the one positioned error
// type, section.Error (file, line, column, message, and a caret excerpt
// where the message points inside a value): Load returns every problem at
// once, in file order, as an ErrorList. What needs more than one section,
// or the command line, is checked once all decoded: the budgets and
// sources against the kernel's limits (the collector's own checks), the
// memory budget's plan (internal/memory), the web configuration file,
// the outbox and the credentials files the webhooks name. The packages
// that run the configuration receive typed values (Config), never YAML.
// Imports run one way: config imports the section owners, which import
// only config/section.
//
// spanwatch check is Load, and spanwatch run is Load, then agent.New and
// Run: a file that Load accepts fails later only for reasons of the
// running system (a kernel that refuses a program, a binary with no
// marker). A file without any section (empty, or only comments: a file
// caught half-written) is refused by both; write rules: [] to run without
// rules.
//
// The collector: and listener: sections are plain settings, each one row
// of a table (settings.go; collector.go, listener.go): its key and flag,
// how it is written, its bounds (the collector's own constants and
// checks, which collector.New runs too), its default, whether a reload
// applies it, and what it does. Decoding, the command-line flags
// (CollectorFlags) and their usage text, the JSON Schema's properties
// and descriptions (Schema, what spanwatch check --schema prints), what a
// reload applies (restartChanges) and shell completion (FlagWords) all
// read the rows: a new setting is a field and a row.
//
// A Coordinator reloads the file when it or a file it names changes
// (polled every second) and on SIGHUP, as a transaction with
// subscribers, the way Alertmanager's config.Coordinator calls its
// subscribers but with two steps: every subscriber prepares its part of
// the new configuration (the budgets written into the kernel's set not in
// force, the webhooks built), then all commit, or, when one refuses, the
// prepared ones abort and nothing changes. Settings only a restart
// applies keep their running values: each is logged as an error saying
// so, counted in spanwatch_config_restart_pending and listed by GET
// /api/status, while the rest of the file applies. A file that does not
// load, or a part that does not prepare, keeps the whole running
// configuration; the failure is logged and counted.
package config
