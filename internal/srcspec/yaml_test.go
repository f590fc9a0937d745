package srcspec

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
)

// valueOf returns the node of key in the first mapping of doc.
func valueOf(t *testing.T, doc, key string) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &n); err != nil {
		t.Fatal(err)
	}
	m := n.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	t.Fatalf("no %s in %q", key, doc)
	return nil
}

// decodePredicate, decodeLabels and decodeLabelCap run the decoders on a
// decoder of their own and return what it collected.
func decodePredicate(file string, n *yaml.Node, r Resolver) (*Predicate, error) {
	d := section.NewDecoder(file, nil)
	p := DecodePredicate(d, n, r)
	return p, d.Err()
}

func decodeLabels(file string, n *yaml.Node, r Resolver) ([]Label, []error) {
	d := section.NewDecoder(file, nil)
	ls, _ := DecodeLabels(d, n, r)
	var errs []error
	for _, e := range d.Errors() {
		errs = append(errs, e)
	}
	return ls, errs
}

func decodeLabelCap(file string, n *yaml.Node) (int, error) {
	d := section.NewDecoder(file, nil)
	v, _ := DecodeLabelCap(d, n)
	return v, d.Err()
}

func TestDecodePredicatePositions(t *testing.T) {
	for _, tc := range []struct {
		doc, want string
	}{
		{"x: 1\nerror: arg2 => 500\n", "f.yaml:2:13: error: unknown operator \"=>\": did you mean >=?\n\targ2 => 500\n\t     ^"},
		{"error: \"arg2 >= 5OO\"\n", "f.yaml:1:17: error: bad number \"5OO\": want decimal, 0x hex, 0o octal or 0b binary digits\n\targ2 >= 5OO\n\t        ^"},
		{"error: 'arg9x > 1'\n", "f.yaml:1:9: error: unknown operand arg9x: want arg0 to arg11\n\targ9x > 1\n\t^"},
		{"error: |\n  arg1 > 1 and\n  arg2 =< 3\n", "f.yaml:3: error: unknown operator \"=<\": did you mean <=?\n\targ2 =< 3\n\t     ^"},
		{"error: 12\n", "f.yaml:1:10: error: unexpected end of predicate: want an operator (== != < <= > >=) after 12\n\t12\n\t  ^"},
		{"error: [a]\n", "f.yaml:1:8: error must be a predicate"},
		{"error: ''\n", "f.yaml:1:8: error must not be empty"},
	} {
		_, err := decodePredicate("f.yaml", valueOf(t, tc.doc, "error"), argResolver)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q:\n%v\nwant:\n%s", tc.doc, err, tc.want)
		}
	}
}

func TestDecodeLabels(t *testing.T) {
	got, errs := decodeLabels("f.yaml", valueOf(t, "labels: {status: arg2, method: arg3}\n", "labels"), argResolver)
	if len(errs) != 0 || len(got) != 2 || got[0] != (Label{"status", 2, "arg2"}) || got[1] != (Label{"method", 3, "arg3"}) {
		t.Fatalf("got %+v, %v", got, errs)
	}
	for _, tc := range []struct {
		doc  string
		want []string
	}{
		{"labels: [arg1]\n", []string{"f.yaml:1:9: labels must be a mapping"}},
		{"labels: {a: arg1, b: arg2, c: arg3, d: arg4}\n", []string{"f.yaml:1:9: 4 labels: a series carries at most 3"}},
		{"labels: {span: arg1}\n", []string{`f.yaml:1:10: label name "span" is taken by the span name`}},
		{"labels: {__x: arg1}\n", []string{"reserved by Prometheus"}},
		{"labels: {1x: arg1}\n", []string{"not starting with a digit"}},
		{"labels: {status: arg12}\n", []string{"f.yaml:1:18: label status: unknown operand arg12"}},
		{"labels: {status: }\n", []string{"f.yaml:1:18: label status: want an operand"}},
		{"labels:\n  a: arg1\n  a: arg2\n", []string{"f.yaml:3:3: label a given twice"}},
	} {
		_, errs := decodeLabels("f.yaml", valueOf(t, tc.doc, "labels"), argResolver)
		if len(errs) != len(tc.want) {
			t.Errorf("%q: errors %v, want %d", tc.doc, errs, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(errs[i].Error(), w) {
				t.Errorf("%q: %v, want it to contain %q", tc.doc, errs[i], w)
			}
		}
	}
}

func TestLabelsEncode(t *testing.T) {
	l := Labels{List: []Label{{"status", 2, "arg2"}, {"m", 5, "arg5"}}}
	if got, want := l.Encode(7), (LabelSpec{Labelset: 7, Count: 2, Operand: [3]uint8{2, 5}, Cap: DefaultLabelCap}); got != want {
		t.Errorf("encoded %+v, want %+v", got, want)
	}
	if (Labels{}).Encode(7) != (LabelSpec{}) {
		t.Error("no labels encode to a label set")
	}
}

func TestDecodeLabelCap(t *testing.T) {
	if v, err := decodeLabelCap("f.yaml", valueOf(t, "label_cap: 20\n", "label_cap")); err != nil || v != 20 {
		t.Errorf("20: %d, %v", v, err)
	}
	for _, doc := range []string{"label_cap: 0\n", "label_cap: 10001\n", "label_cap: x\n", "label_cap: 1.5\n"} {
		if _, err := decodeLabelCap("f.yaml", valueOf(t, doc, "label_cap")); err == nil || !strings.HasPrefix(err.Error(), "f.yaml:1:12: label_cap must be") {
			t.Errorf("%q: %v", doc, err)
		}
	}
}

func TestCheckMetricName(t *testing.T) {
	for _, ok := range []string{"bytes", "queue.depth", "a:b-c_1", "_x"} {
		if err := CheckMetricName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "1x", "a b", "é", strings.Repeat("x", 128)} {
		if err := CheckMetricName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestNearest(t *testing.T) {
	probes := []string{"request__start", "request__done", "query__start", "query__done", "function__return"}
	for _, tc := range []struct{ name, want string }{
		{"request_done", "request__done"},
		{"Request__Done", "request__done"},
		{"request__dne", "request__done"},
		{"query_stat", "query__start"},
		{"funtion_return", "function__return"},
		{"zzz", ""},
		{"request__done", ""}, // exact: nothing to suggest
	} {
		if got := Nearest(tc.name, probes); got != tc.want {
			t.Errorf("Nearest(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}
