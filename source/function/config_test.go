package function

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
)

// decode decodes text as the functions: list of file.
func decode(t *testing.T, file, text string) ([]Target, error) {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(text), &root); err != nil {
		t.Fatal(err)
	}
	d := section.NewDecoder(file, []byte(text))
	out := DecodeSources(d, root.Content[0])
	return out, d.Err()
}

// TestDecodeSources: a binary relative to the rule file, a glob and a
// span name decode into a target declared where the file says; a
// readable binary with no traceable function matching the pattern, a
// missing key and a wrong type are errors at their file:line:col.
func TestDecodeSources(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) on PATH: install build-essential")
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "callprog")
	if out, err := exec.Command(cc, "-O2", "-pthread", "-o", prog, "testdata/callprog.c").CombinedOutput(); err != nil {
		t.Fatalf("cc: %v: %s", err, out)
	}
	file := filepath.Join(dir, "rules.yaml")

	got, err := decode(t, file, "- binary: callprog\n  function: multi_*\n  span: calls\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Binary != prog || got[0].Functions.String() != "multi_*" || got[0].Span != "calls" || got[0].Declared != file+":1:3" {
		t.Fatalf("decoded %+v; want %s, multi_*, calls, declared at %s:1:3", got, prog, file)
	}

	for _, tc := range []struct{ text, want string }{
		{"- {binary: callprog, function: zz_none}\n", ":1:32: no function of " + prog + " matches \"zz_none\""},
		{"- {binary: callprog}\n", ":1:3: a functions source needs function:"},
		{"- {binary: callprog, function: leaf, spam: x}\n", ":1:38: a functions source: unknown key \"spam\""},
		{"- {binary: [a], function: leaf}\n", ":1:12: binary must be a string"},
		{"binary: callprog\n", ":1:1: sources.functions must be a list"},
		{"- {binary: callprog, function: leaf, span: " + strings.Repeat("x", 128) + "}\n", ":1:44: span"},
	} {
		got, err := decode(t, file, tc.text)
		if err == nil || !strings.Contains(err.Error(), file+tc.want) || got != nil {
			t.Errorf("%q: %v, %+v; want an error %s%s and nothing decoded", tc.text, err, got, file, tc.want)
		}
	}

	// A binary that cannot be read here is left to the agent: check may
	// run on another machine.
	if _, err := os.Stat("/nonexistent/prog"); err == nil {
		t.Skip("/nonexistent/prog exists")
	}
	if got, err := decode(t, file, "- {binary: /nonexistent/prog, function: f}\n"); err != nil || len(got) != 1 {
		t.Errorf("an unreadable binary: %v, %+v; want it decoded", err, got)
	}
}

// TestDecodeGo: a Go binary built by a recent Go (this test's own)
// passes the check, on x86-64 and arm64, where Go functions are traced.
func TestDecodeGo(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("Go functions are traced on x86-64 and arm64")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "rules.yaml")
	got, err := decode(t, file, "- {binary: "+exe+", function: testing.tRunner}\n")
	if err != nil || len(got) != 1 {
		t.Errorf("a Go binary: %v, %+v; want it decoded", err, got)
	}
}

// TestDecodeProcess: process: is a glob over executable names that need
// not match any process now; with binary:, without either, with a '/'
// or a lone backslash, it is an error at its file:line:col.
func TestDecodeProcess(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rules.yaml")
	got, err := decode(t, file, "- process: \"prometheus*\"\n  function: promql.*\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Process == nil || got[0].Binary != "" || got[0].Functions.String() != "promql.*" || got[0].Declared != file+":1:3" {
		t.Fatalf("decoded %+v; want process prometheus*, functions promql.*", got)
	}
	if !got[0].Process.Match("prometheus") || !got[0].Process.Match("prometheus-2.42") || got[0].Process.Match("node") {
		t.Errorf("process glob %s matches wrong", got[0].Process)
	}
	if d := got[0].Describe(); d != "functions promql.* in processes named prometheus*" {
		t.Errorf("described as %q", d)
	}
	for _, tc := range []struct{ text, want string }{
		{"- {process: a, binary: /bin/true, function: f}\n", ":1:13: a functions source takes binary: or process:, not both"},
		{"- {process: /usr/bin/a, function: f}\n", ":1:13: process \"/usr/bin/a\": matches the executable's file name, which has no '/'"},
		{"- {process: 'a\\', function: f}\n", ":1:13: process \"a\\\\\": glob \"a\\\\\" ends with a lone backslash"},
		{"- {process: [a], function: f}\n", ":1:13: process must be a string"},
		{"- {function: f}\n", ":1:3: a functions source needs binary: (a file), process: (a glob of executable names) or pid: (one process)"},
	} {
		got, err := decode(t, file, tc.text)
		if err == nil || !strings.Contains(err.Error(), file+tc.want) || got != nil {
			t.Errorf("%q: %v, %+v; want an error %s%s and nothing decoded", tc.text, err, got, file, tc.want)
		}
	}
}

// TestDecodePID: pid: is one process, alone or with an absolute binary:
// in its mount namespace, not checked (no process need run it now); with
// process:, with a relative binary:, not an integer or out of range, it
// is an error at its file:line:col.
func TestDecodePID(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rules.yaml")
	for _, tc := range []struct {
		text, binary, describe string
		pid                    int
	}{
		{"- pid: 4242\n  function: handle\n", "", "functions handle in pid 4242", 4242},
		{"- {pid: 7, binary: /usr/lib/libssl.so.3, function: \"SSL_*\"}\n", "/usr/lib/libssl.so.3", "functions SSL_* in /usr/lib/libssl.so.3 of pid 7", 7},
	} {
		got, err := decode(t, file, tc.text)
		if err != nil {
			t.Fatalf("%q: %v", tc.text, err)
		}
		if len(got) != 1 || got[0].PID != tc.pid || got[0].Binary != tc.binary || got[0].Process != nil || got[0].Declared != file+":1:3" {
			t.Fatalf("%q: decoded %+v; want pid %d, binary %q", tc.text, got, tc.pid, tc.binary)
		}
		if d := got[0].Describe(); d != tc.describe {
			t.Errorf("described as %q, want %q", d, tc.describe)
		}
	}
	for _, tc := range []struct{ text, want string }{
		{"- {pid: 1, process: a, function: f}\n", ":1:9: a functions source takes pid: (one process) or process: (every process of an executable's name), not both"},
		{"- {pid: 1, binary: lib/x.so, function: f}\n", ":1:20: with pid:, binary: is a path in that process's mount namespace (a library it maps, as /proc/PID/maps names it): give it absolute, not \"lib/x.so\""},
		{"- {pid: 0, function: f}\n", ":1:9: pid must be between 1 and 4194304, not 0"},
		{"- {pid: 4194305, function: f}\n", ":1:9: pid must be between 1 and 4194304, not 4194305"},
		{"- {pid: \"12\", function: f}\n", ":1:9: pid must be a process id (an integer)"},
		{"- {pid: [1], function: f}\n", ":1:9: pid must be a process id (an integer)"},
		{"- {pid: 1}\n", ":1:3: a functions source needs function:"},
	} {
		got, err := decode(t, file, tc.text)
		if err == nil || !strings.Contains(err.Error(), file+tc.want) || got != nil {
			t.Errorf("%q: %v, %+v; want an error %s%s and nothing decoded", tc.text, err, got, file, tc.want)
		}
	}
}

// TestProcessSchema: the sources schema (internal/usdt/sources.schema.json)
// accepts and refuses the process: and pid: entries DecodeSources does (a lone
// backslash is left to the decoder).
func TestProcessSchema(t *testing.T) {
	raw, err := os.ReadFile("../../internal/usdt/sources.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("sources.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("sources.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "rules.yaml")
	for _, tc := range []struct {
		text string
		ok   bool
	}{
		{"- {process: prometheus, function: f}\n", true},
		{"- {process: \"node*\", function: f, span: s}\n", true},
		{"- {binary: /nonexistent/prog, function: f}\n", true},
		{"- {process: a, binary: /nonexistent/prog, function: f}\n", false},
		{"- {process: /a, function: f}\n", false},
		{"- {process: \"\", function: f}\n", false},
		{"- {function: f}\n", false},
		{"- {process: a}\n", false},
		{"- {pid: 4242, function: f}\n", true},
		{"- {pid: 7, binary: /usr/lib/libssl.so.3, function: f}\n", true},
		{"- {pid: 1, process: a, function: f}\n", false},
		{"- {pid: 0, function: f}\n", false},
		{"- {pid: 4194305, function: f}\n", false},
		{"- {pid: \"12\", function: f}\n", false},
	} {
		_, derr := decode(t, file, tc.text)
		var v any
		if err := yaml.Unmarshal([]byte("functions:\n"+indent(tc.text)), &v); err != nil {
			t.Fatal(err)
		}
		js, _ := json.Marshal(v)
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
		if err != nil {
			t.Fatal(err)
		}
		serr := sch.Validate(inst)
		if (derr == nil) != tc.ok || (serr == nil) != tc.ok {
			t.Errorf("%q: decoder error %v, schema error %v; want valid=%v for both", tc.text, derr, serr, tc.ok)
		}
	}
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n  ") + "\n"
}
