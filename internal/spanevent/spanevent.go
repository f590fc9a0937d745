package spanevent

// NameLen is the size of the span event's name field (SPAN_NAME_LEN):
// names are at most NameLen-1 bytes, longer ones are cut on a UTF-8
// character boundary (snapshot.TruncateName, name_cut in bpf/aggregate.h).
const NameLen = 128
