// Package glob is the one glob syntax of spanwatch: rule matchers,
// budgets (matched in BPF as well, see Tokens), and the command line's
// filters. '*' matches any run of characters (including '/'), '?' one
// UTF-8 character, '\\' escapes the next character, and a leading '!'
// negates the pattern. A pattern without metacharacters is an exact match.
package glob

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// A Glob matches strings against a pattern: '*' matches any run
// of characters (including '/', so cgroup paths and URL-like span names
// match naturally), '?' one character, '\' escapes the next one. A leading
// '!' negates the pattern. A pattern without metacharacters is an exact
// match.
type Glob struct {
	pattern string
	neg     bool
	exact   bool
	lit     string // the pattern with escapes removed, when exact
	toks    []gtok // the compiled pattern otherwise
}

type gtok struct {
	kind byte // 'l' literal, '*' any run, '?' any one
	lit  string
}

// Compile compiles a pattern.
func Compile(pattern string) (*Glob, error) {
	g := &Glob{pattern: pattern}
	p := pattern
	if strings.HasPrefix(p, "!") {
		g.neg = true
		p = p[1:]
	}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			g.toks = append(g.toks, gtok{kind: 'l', lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '\\':
			if i+1 == len(p) {
				return nil, fmt.Errorf("glob %q ends with a lone backslash", pattern)
			}
			i++
			lit.WriteByte(p[i])
		case '*':
			flush()
			if n := len(g.toks); n == 0 || g.toks[n-1].kind != '*' {
				g.toks = append(g.toks, gtok{kind: '*'})
			}
		case '?':
			flush()
			g.toks = append(g.toks, gtok{kind: '?'})
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	if len(g.toks) == 0 {
		g.exact = true
	} else if len(g.toks) == 1 && g.toks[0].kind == 'l' {
		g.exact, g.lit = true, g.toks[0].lit
	}
	return g, nil
}

// String returns the pattern as written.
func (g *Glob) String() string { return g.pattern }

// Exact reports whether the pattern names one string (no metacharacters,
// not negated), and that string.
func (g *Glob) Exact() (string, bool) { return g.lit, g.exact && !g.neg }

// Match reports whether s matches.
func (g *Glob) Match(s string) bool {
	var ok bool
	if g.exact {
		ok = s == g.lit
	} else {
		ok = matchToks(g.toks, s)
	}
	return ok != g.neg
}

// matchToks is the classic iterative wildcard match: on a mismatch it
// backtracks only to the most recent '*', so it runs in O(len(toks)*len(s))
// and cannot blow up on patterns like "*a*a*a*b".
func matchToks(toks []gtok, s string) bool {
	ti, si := 0, 0
	starT, starS := -1, 0
	for {
		if ti < len(toks) {
			t := toks[ti]
			switch t.kind {
			case '*':
				starT, starS = ti, si
				ti++
				continue
			case '?':
				if si < len(s) {
					// '?' is one character, not one byte.
					_, size := utf8.DecodeRuneInString(s[si:])
					ti, si = ti+1, si+size
					continue
				}
			case 'l':
				if strings.HasPrefix(s[si:], t.lit) {
					ti, si = ti+1, si+len(t.lit)
					continue
				}
			}
		} else if si == len(s) {
			return true
		}
		if starT < 0 || starS >= len(s) {
			return false
		}
		_, size := utf8.DecodeRuneInString(s[starS:])
		starS += size
		ti, si = starT+1, starS
	}
}

// Token kinds, as the BPF matcher (struct budget_glob in bpf/aggregate.h)
// reads them.
const (
	TokenLiteral = 0 // one literal byte
	TokenStar    = 1 // '*': any run of characters
	TokenAny     = 2 // '?': one UTF-8 character
)

// Tokens returns the pattern as the BPF matcher takes it: one kind per
// byte of literal text, per '*' and per '?', the literal bytes beside
// them, and whether the pattern is negated.
func (g *Glob) Tokens() (kinds, lits []byte, neg bool) {
	if g.exact {
		for i := 0; i < len(g.lit); i++ {
			kinds = append(kinds, TokenLiteral)
			lits = append(lits, g.lit[i])
		}
		return kinds, lits, g.neg
	}
	for _, t := range g.toks {
		switch t.kind {
		case '*':
			kinds, lits = append(kinds, TokenStar), append(lits, 0)
		case '?':
			kinds, lits = append(kinds, TokenAny), append(lits, 0)
		default:
			for i := 0; i < len(t.lit); i++ {
				kinds, lits = append(kinds, TokenLiteral), append(lits, t.lit[i])
			}
		}
	}
	return kinds, lits, g.neg
}
