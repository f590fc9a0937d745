// Package tracefs reads what the kernel says about its trace events: the
// format file of an event (its id and its fields, with their offsets, sizes
// and signedness) and the events registered under the user_events systems.
//
// spanwatch casts user_events payloads in BPF by the offsets a format file
// gives, so a user_event registered by any program becomes a span source
// without a header shared with that program and without a compiler at run
// time. The parser is portable (it reads bytes); listing and reading events
// needs Linux with tracefs mounted (userevents.TracefsDir mounts it when
// it may).
package tracefs
