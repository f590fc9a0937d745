package promtest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStart scrapes a fixed target and evaluates a recording rule over it.
func TestStart(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "# TYPE answer gauge\nanswer{kind=\"x\"} 42")
	}))
	defer srv.Close()
	rules := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(rules, []byte("groups:\n- name: t\n  rules:\n  - record: answer:doubled\n    expr: 2 * answer\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := Start(t, Config{Targets: map[string]string{"fixed": strings.TrimPrefix(srv.URL, "http://")}, RuleFiles: []string{rules}})
	p.Await(`answer{job="fixed",kind="x"}`, 42, 30*time.Second)
	if v := p.AwaitAny(`answer:doubled`, 30*time.Second); v != 84 {
		t.Errorf("answer:doubled = %v, want 84", v)
	}
	if r := p.Query(`answer`); len(r) != 1 || r[0].Labels["kind"] != "x" {
		t.Errorf("Query(answer) = %+v", r)
	}
}
