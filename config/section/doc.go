// Package section is what every decoder of a section of spanwatch's
// configuration file shares: the one positioned Error (file, line, column,
// message, and an excerpt with a caret where the message points inside a
// value), the ErrorList a load reports, the Decoder that collects a file's
// errors while its sections decode, ParseDocument, which reads the file as
// one bounded YAML document, and the helpers that read YAML nodes strictly.
//
// Package config owns the file: it splits the top level once and hands
// each section's node to the package that owns the section's types
// (policy, notify, metrics, internal/usdt, internal/tpsource), whose
// decoder reports into the same Decoder. Those packages import this one,
// and config imports them: the imports run one way.
package section
