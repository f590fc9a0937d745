// Package source defines what a span source is to the collector, and what
// the collector lends a source: the Core.
//
// A span source is one way spans reach the kernel's aggregation core
// (bpf/aggregate.h): the SDKs' marker (source/marker) and user_event
// (source/sdkevent), USDT probes (source/usdt), user_events and
// EventHeader tracepoints (source/tracepoint), and, to come, uprobes on
// any function. Each is one package that owns its BPF object (loaded
// beside the core, sharing the core's maps by name; the marker's and the
// SDK event's programs are the core object's own, Core.Programs, because
// every SDK span takes them), the decoding of its
// section of the configuration file, its attach and detach, and its
// health counters. A source sees the collector only through a Core, a
// small value with the core's maps and the few services a source calls
// (label sets, name resolvers, symbolizer anchors, in-flight sampling,
// health): it never holds the collector.
//
// The agent lists the configured kinds it attaches in one place
// (agent/sources.go): a new source is its package plus one line there
// (and one in config.sourceSections for its YAML section). The two built
// in to the core's object are attached by collector.New, as its
// Config.Sources chooses.
//
// A source that cannot run on this kernel or machine says so when it
// attaches (its BPF object's loader returns the error), so no
// architecture needs a stub per source; the sources on tracepoints
// (source/tracepoint, source/sdkevent) build on Linux only, as the
// collector does.
package source
