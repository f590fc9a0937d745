package duration

import (
	"errors"
	"flag"
	"io"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
)

func TestParse(t *testing.T) {
	const day = 24 * time.Hour
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"0s", 0},
		{"250ms", 250 * time.Millisecond},
		{"1.5s", 1500 * time.Millisecond},
		{".5s", 500 * time.Millisecond},
		{"1h30m", 90 * time.Minute},
		{"1m30s", 90 * time.Second},
		{"300us", 300 * time.Microsecond},
		{"300µs", 300 * time.Microsecond},
		{"300μs", 300 * time.Microsecond},
		{"42ns", 42},
		{"1d", day},
		{"1d12h", day + 12*time.Hour},
		{"2w", 14 * day},
		{"1y", 365 * day},
		{"1.5d", 36 * time.Hour},
		{"+10s", 10 * time.Second},
	} {
		got, err := Parse(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "10", "1.5", "-1s", "1x", "s", "1d-2h", "1..5s", "10 s", "ms", "+", "1e3s", "999999y"} {
		if d, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", in, d)
		}
	}
	_, err := Parse("1fortnight")
	if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), `unknown unit "fortnight"`) {
		t.Errorf("Parse(1fortnight) error = %v, want one naming the unit and wrapping ErrSyntax", err)
	}
}

// TestParseAgreesWithGoAndPrometheus checks that Parse reads what
// time.ParseDuration and Prometheus's model.ParseDuration read, to the
// nanosecond, on random inputs of their syntaxes.
func TestParseAgreesWithGoAndPrometheus(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	goUnits := []string{"ns", "us", "µs", "ms", "s", "m", "h"}
	promUnits := []string{"y", "w", "d", "h", "m", "s", "ms"} // descending, as Prometheus wants
	for range 5000 {
		var b strings.Builder
		for range 1 + rng.Intn(3) {
			b.WriteString(itoa(rng.Intn(1000)))
			if rng.Intn(3) == 0 {
				b.WriteString("." + itoa(rng.Intn(1000)))
			}
			b.WriteString(goUnits[rng.Intn(len(goUnits))])
		}
		s := b.String()
		want, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("time.ParseDuration(%q): %v", s, err)
		}
		if got, err := Parse(s); err != nil || got != want {
			t.Fatalf("Parse(%q) = %v, %v; time.ParseDuration says %v", s, got, err, want)
		}
	}
	for range 5000 {
		var b strings.Builder
		for i, u := range promUnits {
			if rng.Intn(2) == 0 || (i == len(promUnits)-1 && b.Len() == 0) {
				b.WriteString(itoa(1+rng.Intn(99)) + u)
			}
		}
		s := b.String()
		want, err := model.ParseDuration(s)
		if err != nil {
			t.Fatalf("model.ParseDuration(%q): %v", s, err)
		}
		if got, err := Parse(s); err != nil || got != time.Duration(want) {
			t.Fatalf("Parse(%q) = %v, %v; model.ParseDuration says %v", s, got, err, time.Duration(want))
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{250 * time.Millisecond, "250ms"},
		{90 * time.Minute, "1h30m0s"},
		{24 * time.Hour, "1d"},
		{36 * time.Hour, "1d12h"},
		{14 * 24 * time.Hour, "2w"},
		{15*24*time.Hour + time.Hour, "2w1d1h"},
		{25*time.Hour + time.Minute, "25h1m0s"},
	} {
		got := Format(tc.d)
		if got != tc.want {
			t.Errorf("Format(%v) = %q, want %q", tc.d, got, tc.want)
		}
		if back, err := Parse(got); err != nil || back != tc.d {
			t.Errorf("Parse(Format(%v)) = %v, %v", tc.d, back, err)
		}
	}
}

func TestFlag(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	a := Flag(fs, "a", 10*time.Second, "")
	var b time.Duration
	Var(fs, &b, "b", time.Minute, "")
	if err := fs.Parse([]string{"-a", "1d", "-b=1h30m"}); err != nil {
		t.Fatal(err)
	}
	if *a != 24*time.Hour || b != 90*time.Minute {
		t.Errorf("a = %v, b = %v", *a, b)
	}
	if err := fs.Parse([]string{"-a", "-5s"}); err == nil {
		t.Error("a negative duration flag was accepted")
	}
	if got := fs.Lookup("b").DefValue; got != "1m0s" {
		t.Errorf("DefValue = %q", got)
	}
}
