package lint

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// listed is the part of `go list -json` the checks use.
type listed struct {
	Dir        string
	ImportPath string
	Export     string
	GoFiles    []string
	DepOnly    bool
	Module     *struct{ Main bool }
}

// goList runs `go list -export -deps -json` on patterns from the module root
// and returns the packages, dependencies included.
func goList(t *testing.T, patterns ...string) []listed {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(gobin, append([]string{"list", "-e", "-export", "-deps", "-json=Dir,ImportPath,Export,GoFiles,DepOnly,Module"}, patterns...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// newImporter imports packages from the export data go list reported.
func newImporter(fset *token.FileSet, pkgs []listed) types.Importer {
	exports := make(map[string]string, len(pkgs))
	for _, p := range pkgs {
		exports[p.ImportPath] = p.Export
	}
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, os.ErrNotExist
		}
		return os.Open(f)
	})
}

func typeCheck(fset *token.FileSet, imp types.Importer, path string, files []*ast.File) (*types.Info, error) {
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: imp}
	_, err := conf.Check(path, fset, files, info)
	return info, err
}

// TestRepositoryLogStyle checks every slog call in the module's non-test
// code.
func TestRepositoryLogStyle(t *testing.T) {
	pkgs := goList(t, "./...")
	fset := token.NewFileSet()
	imp := newImporter(fset, pkgs)
	checked := 0
	for _, p := range pkgs {
		if p.DepOnly || p.Module == nil || !p.Module.Main || len(p.GoFiles) == 0 {
			continue
		}
		var files []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		info, err := typeCheck(fset, imp, p.ImportPath, files)
		if err != nil {
			t.Fatalf("type-check %s: %v", p.ImportPath, err)
		}
		for _, pr := range CheckSlog(fset, files, info) {
			t.Error(pr)
		}
		checked++
	}
	// The module has some forty packages; far fewer means go list or the
	// filter above went wrong and the check saw nothing.
	if checked < 20 {
		t.Fatalf("checked %d packages, want the module's (at least 20)", checked)
	}
}

func TestCheckSlog(t *testing.T) {
	pkgs := goList(t, "log/slog", "context")
	for _, tc := range []struct {
		name string
		body string
		want []string // problem substrings, in order
	}{
		{"good", `l.Info("overrun_read_failed", "error", err, "cpu", 3)
			slog.Warn("v2_ready")
			l.Log(ctx, slog.LevelInfo, "reload_done", "rules", 2)
			l.LogAttrs(ctx, slog.LevelWarn, "queue_full", slog.Int("dropped", 1))
			l.ErrorContext(ctx, "send_failed", slog.String("url_host", "x"), "attempt", 2)
			l.Debug(name, args...)`, []string{"slog message is not a string constant"}},
		{"sentence", `l.Info("Reloaded rules")`, []string{`slog message "Reloaded rules" is not a snake_case`}},
		{"spaced message", `slog.Error("send failed", "error", err)`, []string{`"send failed"`}},
		{"dynamic message", `l.Warn("x: " + name)`, []string{"not a string constant"}},
		{"camel key", `l.Info("started", "listenAddr", ":1")`, []string{`slog key "listenAddr" is not snake_case`}},
		{"spaced key", `l.WarnContext(ctx, "started", "listen addr", ":1")`, []string{`slog key "listen addr"`}},
		{"dynamic key", `l.Info("started", name, 1)`, []string{"slog key is not a string constant"}},
		{"attr key", `l.LogAttrs(ctx, slog.LevelInfo, "started", slog.Int("maxSeries", 1))`, []string{`slog key "maxSeries"`}},
		{"log message", `l.Log(ctx, slog.LevelInfo, "Started.")`, []string{`"Started."`}},
		{"not slog", `var b strings.Builder; b.WriteString("Not A Log")`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := `package p
import ("context"; "log/slog"; "strings")
var _ = strings.ToLower
func f(ctx context.Context, l *slog.Logger, err error, name string, args []any) {
` + tc.body + `
}`
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "p.go", src, 0)
			if err != nil {
				t.Fatal(err)
			}
			info, err := typeCheck(fset, newImporter(fset, pkgs), "p", []*ast.File{f})
			if err != nil {
				t.Fatal(err)
			}
			probs := CheckSlog(fset, []*ast.File{f}, info)
			if len(probs) != len(tc.want) {
				t.Fatalf("got %d problems %v, want %d %q", len(probs), probs, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(probs[i].Msg, w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, probs[i].Msg, w)
				}
			}
		})
	}
}

func TestIsSnakeCase(t *testing.T) {
	for s, want := range map[string]bool{
		"overrun_read_failed": true, "error": true, "ipv6_listen": true, "http2": true,
		"": false, "Error": false, "listenAddr": false, "send failed": false, "a__b": false,
		"_a": false, "a_": false, "9lives": false, "x-y": false, "fentry_unavailable.": false,
	} {
		if got := IsSnakeCase(s); got != want {
			t.Errorf("IsSnakeCase(%q) = %v, want %v", s, got, want)
		}
	}
}
