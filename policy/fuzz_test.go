package policy

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzParse feeds arbitrary bytes to the rule file loader: it must never
// panic and must answer quickly, whatever the input (alias bombs and deep
// nesting included). Policy files are not read: the fuzzer's paths point
// nowhere, which exercises the missing-file errors instead.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/good", "testdata/bad"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, name := range files {
			data, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		cfg, err := Parse("fuzz.yaml", data, Options{Dir: t.TempDir()})
		if el := time.Since(start); el > 3*time.Second {
			t.Fatalf("Parse took %v", el)
		}
		if err == nil && cfg == nil {
			t.Fatal("nil config without an error")
		}
		if err != nil && err.Error() == "" {
			t.Fatal("empty error message")
		}
	})
}
