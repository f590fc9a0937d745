// Package srcspec is the vocabulary every span source shares to map the
// values of a probe or an event onto series: error predicates
// ("arg2 >= 500 and arg3 != 0"), labels taken from values with a cap on
// their distinct values, and argument metrics. USDT sources (internal/usdt)
// and tracepoint sources (user_events, EventHeader) decode their rule file
// options with it and encode the result for bpf/source.h, its BPF side.
//
// Operands are named by the source (arg0..arg11 for USDT probes, field
// names for events) and resolved to an index in the operand array the BPF
// program fetches. A predicate is parsed (ParsePredicate), checked, and
// compiled into disjunctive normal form: at most MaxTerms comparisons of an
// operand with a constant, in at most MaxGroups groups whose comparisons
// must all hold. Comparisons are exact whatever the operands' signedness,
// which the BPF side learns from each value (a USDT argument's spec, a
// field's type): Eval is the reference the BPF evaluator is tested against.
package srcspec
