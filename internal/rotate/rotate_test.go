package rotate

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// files returns the files in dir and their line counts.
func files(t *testing.T, dir string) map[string]int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			t.Errorf("%s does not end with a whole line", e.Name())
		}
		out[e.Name()] = strings.Count(string(b), "\n")
	}
	return out
}

func TestRotate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		max   int64
		keep  int
		lines int
		want  map[string]int
	}{
		// 10-byte lines, 35-byte limit: 3 lines a file.
		{"keep 2", 35, 2, 10, map[string]int{"out.jsonl": 1, "out.jsonl.1": 3, "out.jsonl.2": 3}},
		{"keep 5", 35, 5, 10, map[string]int{"out.jsonl": 1, "out.jsonl.1": 3, "out.jsonl.2": 3, "out.jsonl.3": 3}},
		{"keep 0", 35, 0, 10, map[string]int{"out.jsonl": 1}},
		{"no limit", 0, 3, 10, map[string]int{"out.jsonl": 10}},
		// A line longer than the limit still goes whole into a file.
		{"line over the limit", 5, 1, 3, map[string]int{"out.jsonl": 1, "out.jsonl.1": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "out.jsonl")
			f, err := Open(path, tc.max, tc.keep)
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.lines {
				if _, err := fmt.Fprintf(f, "line %04d\n", i); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if got := files(t, dir); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("files %v, want %v", got, tc.want)
			}
			// The newest lines are in the file itself, the oldest kept
			// in the highest number.
			if tc.max > 0 && tc.keep > 0 && tc.lines == 10 {
				b, _ := os.ReadFile(path)
				if string(b) != "line 0009\n" {
					t.Errorf("current file %q, want the last line", b)
				}
			}
		})
	}
}

// TestRotateReopen checks that a restarted writer appends to the file it
// finds and counts its size.
func TestRotateReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.jsonl")
	for range 2 {
		f, err := Open(path, 25, 1)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			fmt.Fprintf(f, "line %04d\n", i)
		}
		f.Close()
	}
	if got := files(t, dir); fmt.Sprint(got) != fmt.Sprint(map[string]int{"out.jsonl": 2, "out.jsonl.1": 2}) {
		t.Errorf("files %v", got)
	}
}

// TestRotateConcurrentJSON writes JSON lines from several goroutines and
// checks every line of every file decodes: no line is torn.
func TestRotateConcurrentJSON(t *testing.T) {
	dir := t.TempDir()
	f, err := Open(filepath.Join(dir, "s.jsonl"), 4096, 100)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			enc := json.NewEncoder(f)
			for i := range 200 {
				enc.Encode(map[string]any{"g": g, "i": i, "pad": strings.Repeat("x", i%50)})
			}
		}()
	}
	wg.Wait()
	f.Close()
	total := 0
	names := []string{}
	for n := range files(t, dir) {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fh, _ := os.Open(filepath.Join(dir, n))
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var v map[string]any
			if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
				t.Fatalf("%s: torn line %q", n, sc.Text())
			}
			total++
		}
		fh.Close()
	}
	if total != 800 {
		t.Errorf("%d lines, want 800", total)
	}
	if f.Rotations() == 0 {
		t.Error("no rotation")
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"100": 100, "100B": 100, "4k": 4096, "100M": 100 << 20, "1GiB": 1 << 30, "500MB": 500e6, "2 GB": 2e9} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "M", "10X", "-5M", "1.5G", "99999999999G"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) succeeded", in)
		}
	}
}
