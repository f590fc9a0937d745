package duration

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"
	"time"
)

// Units lists the units Parse accepts, for messages.
const Units = "ns, us, µs, ms, s, m, h, d, w, y"

// units maps a unit to its length, longest names first where one is a
// prefix of another ("ms" before "m").
var units = []struct {
	name string
	d    time.Duration
}{
	{"ns", time.Nanosecond},
	{"us", time.Microsecond},
	{"µs", time.Microsecond}, // U+00B5 micro sign
	{"μs", time.Microsecond}, // U+03BC Greek mu
	{"ms", time.Millisecond},
	{"s", time.Second},
	{"m", time.Minute},
	{"h", time.Hour},
	{"d", 24 * time.Hour},
	{"w", 7 * 24 * time.Hour},
	{"y", 365 * 24 * time.Hour},
}

// ErrSyntax is wrapped by every error Parse returns.
var ErrSyntax = errors.New("want a number with a unit (" + Units + "), e.g. 250ms, 1h30m or 1d")

// Parse reads a duration: see the package documentation for the syntax.
func Parse(s string) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("empty duration: %w", ErrSyntax)
	}
	if s == "0" {
		return 0, nil
	}
	if s[0] == '-' {
		return 0, fmt.Errorf("negative duration %q: durations are positive", s)
	}
	rest := strings.TrimPrefix(s, "+")
	if rest == "" {
		return 0, fmt.Errorf("bad duration %q: %w", s, ErrSyntax)
	}
	var total uint64
	for rest != "" {
		// The whole part, then an optional fraction; one digit at least.
		i := 0
		var whole uint64
		for ; i < len(rest) && rest[i] >= '0' && rest[i] <= '9'; i++ {
			if whole > (math.MaxInt64-9)/10 {
				return 0, fmt.Errorf("duration %q is too long (at most about 292y)", s)
			}
			whole = whole*10 + uint64(rest[i]-'0')
		}
		digits := i
		var frac uint64
		scale := 1.0
		if i < len(rest) && rest[i] == '.' {
			i++
			for ; i < len(rest) && rest[i] >= '0' && rest[i] <= '9'; i++ {
				digits++
				if frac < math.MaxInt64/10 { // further digits cannot matter
					frac = frac*10 + uint64(rest[i]-'0')
					scale *= 10
				}
			}
		}
		if digits == 0 {
			return 0, fmt.Errorf("bad duration %q: %w", s, ErrSyntax)
		}
		num := rest[:i]
		rest = rest[i:]
		j := 0
		for j < len(rest) && !(rest[j] >= '0' && rest[j] <= '9') && rest[j] != '.' {
			j++
		}
		unit := rest[:j]
		rest = rest[j:]
		var d uint64
		for _, u := range units {
			if u.name == unit {
				d = uint64(u.d)
			}
		}
		if d == 0 {
			if unit == "" {
				return 0, fmt.Errorf("bad duration %q: %s needs a unit: %w", s, num, ErrSyntax)
			}
			return 0, fmt.Errorf("bad duration %q: unknown unit %q: %w", s, unit, ErrSyntax)
		}
		// As time.ParseDuration does, so both agree to the nanosecond.
		if whole > math.MaxInt64/d {
			return 0, fmt.Errorf("duration %q is too long (at most about 292y)", s)
		}
		v := whole * d
		if frac > 0 {
			v += uint64(float64(frac) * (float64(d) / scale))
		}
		total += v
		if v > math.MaxInt64 || total > math.MaxInt64 {
			return 0, fmt.Errorf("duration %q is too long (at most about 292y)", s)
		}
	}
	return time.Duration(total), nil
}

// Format writes d the way Parse reads it, with days and weeks where d is a
// whole number of them ("1d", "2w", "1d12h"); otherwise as time.Duration's
// String does ("1h30m0s", "250ms").
func Format(d time.Duration) string {
	if d <= 0 || d%time.Hour != 0 || d < 24*time.Hour {
		return d.String()
	}
	var b strings.Builder
	if w := d / (7 * 24 * time.Hour); w > 0 {
		fmt.Fprintf(&b, "%dw", w)
		d -= w * 7 * 24 * time.Hour
	}
	if days := d / (24 * time.Hour); days > 0 {
		fmt.Fprintf(&b, "%dd", days)
		d -= days * 24 * time.Hour
	}
	if h := d / time.Hour; h > 0 {
		fmt.Fprintf(&b, "%dh", h)
	}
	return b.String()
}

// Value is a flag.Value that reads a duration with Parse.
type Value struct{ p *time.Duration }

var _ flag.Value = Value{}

// Var defines a duration flag on fs, read with Parse.
func Var(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(Value{p}, name, usage)
}

// Flag defines a duration flag on fs, read with Parse, and returns where
// its value is kept.
func Flag(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	Var(fs, p, name, value, usage)
	return p
}

func (v Value) String() string {
	if v.p == nil {
		return "0s"
	}
	return Format(*v.p)
}

// Set parses s with Parse.
func (v Value) Set(s string) error {
	d, err := Parse(s)
	if err != nil {
		return err
	}
	*v.p = d
	return nil
}
