package lint

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestLayering checks that packages do not depend on what they must not
// (STYLE.md, house rule 11): the SDK applications link stays light, each
// package knows only what it needs, and the arrows of the data flow point
// one way. A forbidden path ending in "/..." forbids everything below it.
func TestLayering(t *testing.T) {
	const mod = "github.com/spanwatch/spanwatch/"
	for _, tc := range []struct {
		pkg string
		// deps are forbidden anywhere in pkg's dependencies, imports in
		// its own import lists (its tests' included).
		deps, imports []string
		why           string
	}{
		{pkg: "emit", deps: []string{mod + "snapshot", "encoding/json", "math/big"},
			why: "every instrumented application links emit: it shares the span event's sizes through internal/spanevent, not snapshot"},
		{pkg: "detector", imports: []string{"github.com/open-policy-agent/opa/..."},
			why: "OPA stays behind policy: the detector holds a policy.InputValue"},
		{pkg: "alert", deps: []string{mod + "snapshot"},
			why: "an alert carries its series' labels and annotations, not the snapshot's types"},
		{pkg: "notify", deps: []string{mod + "snapshot"},
			why: "notify delivers the annotations the detector wrote; it reads no snapshot"},
		{pkg: "source/marker", deps: []string{mod + "collector", mod + "agent"},
			why: "a source sees the collector only through the source.Core it lends"},
		{pkg: "source/sdkevent", deps: []string{mod + "collector", mod + "agent"},
			why: "a source sees the collector only through the source.Core it lends"},
		{pkg: "source/usdt", deps: []string{mod + "collector", mod + "agent"},
			why: "a source sees the collector only through the source.Core it lends"},
		{pkg: "source/tracepoint", deps: []string{mod + "collector", mod + "agent"},
			why: "a source sees the collector only through the source.Core it lends"},
		{pkg: "source/function", deps: []string{mod + "collector", mod + "agent"},
			why: "a source sees the collector only through the source.Core it lends"},
		{pkg: "collector/overrun", deps: []string{mod + "collector"},
			why: "the overrun pipeline takes what it needs of the collector in its Config"},
	} {
		l := goWords(t, "-deps", mod+tc.pkg)
		for _, f := range tc.deps {
			if p := match(l, f); p != "" {
				t.Errorf("%s depends on %s: %s", tc.pkg, p, tc.why)
			}
		}
		if len(tc.imports) == 0 {
			continue
		}
		l = goWords(t, "-f", "{{join .Imports \"\\n\"}}\n{{join .TestImports \"\\n\"}}\n{{join .XTestImports \"\\n\"}}", mod+tc.pkg)
		for _, f := range tc.imports {
			if p := match(l, f); p != "" {
				t.Errorf("%s imports %s: %s", tc.pkg, p, tc.why)
			}
		}
	}
}

// TestInternalIsBelow checks that the packages under internal/, the helpers
// the pipeline's packages share, import none of the pipeline's upper
// stages: a helper that needs the detector or the policy engine (as rule
// unit tests do, detector/ruletest) lives beside what it drives.
func TestInternalIsBelow(t *testing.T) {
	const mod = "github.com/spanwatch/spanwatch/"
	// config/section, the positioned error and the decoder every section
	// reports into, is a leaf that sources' helpers use.
	upper := []string{mod + "policy/...", mod + "detector/...", mod + "alert/...", mod + "notify/...", mod + "agent/...", mod + "config"}
	lines := goLines(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", mod+"internal/...")
	for _, line := range lines {
		pkg, imports, _ := strings.Cut(line, " ")
		for _, u := range upper {
			if p := match(strings.Fields(imports), u); p != "" {
				t.Errorf("%s imports %s: internal/ holds helpers below the pipeline's stages", pkg, p)
			}
		}
	}
}

// match returns the first of list that pattern names, or "".
func match(list []string, pattern string) string {
	prefix, tree := strings.CutSuffix(pattern, "/...")
	for _, p := range list {
		if p == prefix || tree && strings.HasPrefix(p, prefix+"/") {
			return p
		}
	}
	return ""
}

// goWords runs go list with args from the module root and returns the
// words it prints.
func goWords(t *testing.T, args ...string) []string {
	return strings.Fields(strings.Join(goLines(t, args...), "\n"))
}

// goLines runs go list with args from the module root and returns the
// lines it prints.
func goLines(t *testing.T, args ...string) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(gobin, append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}
