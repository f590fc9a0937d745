package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckFiles(t *testing.T) {
	var out bytes.Buffer
	err := checkFiles(&out, []string{"../../config/testdata/good/minimal.yaml", "../../examples/rego/spanwatch.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	want := "../../config/testdata/good/minimal.yaml: OK (1 rules, 0 policies, 0 budgets)\n" +
		"../../examples/rego/spanwatch.yaml: OK (1 rules, 1 policies, 2 budgets)\n"
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}

	out.Reset()
	err = checkFiles(&out, []string{"../../policy/testdata/bad/duplicate_rule.yaml", "../../config/testdata/good/minimal.yaml", "../../policy/testdata/bad/rego_http_send.yaml"})
	if err == nil || err.Error() != "2 of 3 files failed" {
		t.Errorf("err = %v", err)
	}
	for _, want := range []string{
		"../../policy/testdata/bad/duplicate_rule.yaml: FAILED\n  ../../policy/testdata/bad/duplicate_rule.yaml:6:5: duplicate rule name \"CheckoutSlow\" (first defined at line 2)\n",
		"minimal.yaml: OK",
		"../../policy/testdata/bad/http_send.rego:4:10: http.send is not allowed",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestTestFiles(t *testing.T) {
	var out bytes.Buffer
	err := testFiles(context.Background(), &out, []string{"../../examples/rego/spanwatch.test.yaml"}, nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "  PASS  an overrun storm in one container\n") || !strings.HasSuffix(out.String(), "3 passed, 0 failed\n") {
		t.Errorf("output:\n%s", out.String())
	}

	out.Reset()
	err = testFiles(context.Background(), &out, []string{"../../detector/ruletest/testdata/failing.test.yaml", "missing.test.yaml"}, nil)
	if err == nil {
		t.Fatal("failing tests passed")
	}
	for _, want := range []string{
		"  FAIL  wrong expectations\n        at 0s (step 0): alert {alertname=\"Slow\", span=\"checkout\"}: state pending, want firing\n",
		"  PASS  right expectations\n",
		"missing.test.yaml: ERROR\n",
		"2 passed, 1 failed, 1 files could not run\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestCheckTestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"check", "../../examples/rego/spanwatch.yaml"}, 0},
		{[]string{"check", "../../policy/testdata/bad/rego_http_send.yaml"}, 1},
		{[]string{"check"}, 2},
		{[]string{"test", "../../examples/rego/spanwatch.test.yaml"}, 0},
		{[]string{"test", "../../detector/ruletest/testdata/failing.test.yaml"}, 1},
		{[]string{"test"}, 2},
		{[]string{"test", "--run", "right", "../../detector/ruletest/testdata/failing.test.yaml"}, 0},
		{[]string{"test", "--run", "(", "../../detector/ruletest/testdata/failing.test.yaml"}, 2},
	} {
		var stderr bytes.Buffer
		if code := run(tc.args, &bytes.Buffer{}, &stderr); code != tc.code {
			t.Errorf("spanwatch %v: exit %d, want %d (%s)", tc.args, code, tc.code, stderr.String())
		}
	}
}

func TestCheckWebhooks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hooks.yaml")
	if err := os.WriteFile(path, []byte("rules: []\nwebhooks:\n  - name: ops\n    urll: https://x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := checkFiles(&out, []string{path}); err == nil {
		t.Fatal("a misspelled webhook key passed check")
	}
	if want := path + ":4:5: unknown key \"urll\""; !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}
}
