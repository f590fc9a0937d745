package ehtest

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestEncodeMatchesGoldens(t *testing.T) {
	for _, tc := range GoldenCases {
		t.Run(tc.File, func(t *testing.T) {
			want, err := Golden(tc.File)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tc.X.Encode(&tc.Span)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				n := 0
				for n < len(got) && n < len(want) && got[n] == want[n] {
					n++
				}
				t.Fatalf("%d bytes, golden %d; first difference at byte %d:\n got %q\nwant %q", len(got), len(want), n,
					got[max(0, n-16):min(len(got), n+16)], want[max(0, n-16):min(len(want), n+16)])
			}
		})
	}
}

func TestTime(t *testing.T) {
	for _, tc := range []struct {
		t    time.Time
		z    bool
		want string
	}{
		{time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), true, "2026-01-02T03:04:05Z"},
		{time.Date(2026, 1, 2, 3, 4, 5, 120_000_000, time.UTC), true, "2026-01-02T03:04:05.120Z"},
		{time.Date(2026, 1, 2, 3, 4, 5, 123_400_000, time.UTC), false, "2026-01-02T03:04:05.123400+00:00"},
		{time.Date(2026, 1, 2, 3, 4, 5, 123_456_780, time.UTC), true, "2026-01-02T03:04:05.123456780Z"},
		{time.Date(2026, 1, 2, 5, 4, 5, 0, time.FixedZone("x", 2*3600)), true, "2026-01-02T03:04:05Z"},
	} {
		if got := Time(tc.t, tc.z); got != tc.want {
			t.Errorf("Time(%v, %t) = %s, want %s", tc.t, tc.z, got, tc.want)
		}
	}
}

func TestEncodeTooLarge(t *testing.T) {
	x := Exporter{Version: RustMain}
	s := Span{Name: strings.Repeat("n", 65535-68-200)} // with the rest, over the limit
	if _, err := x.Encode(&s); err != ErrTooLarge {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	s.Name = strings.Repeat("n", 1000)
	if _, err := x.Encode(&s); err != nil {
		t.Fatal(err)
	}
}
