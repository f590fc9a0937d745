package notify

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
	"github.com/spanwatch/spanwatch/internal/duration"
)

// position is where a YAML node starts.
type position struct{ Line, Col int }

// meta records where a YAML mapping and each of its keys were found, so
// Validate can point at the offending line, and which keys were set, so
// defaults apply only to keys that were left out.
type meta struct {
	pos    position
	fields map[string]position
}

func (m *meta) setMeta(p position, fields map[string]position) { m.pos, m.fields = p, fields }

func (m *meta) isSet(key string) bool { _, ok := m.fields[key]; return ok }

// at returns the position of key, or of the mapping when key was not set.
func (m *meta) at(key string) position {
	if p, ok := m.fields[key]; ok {
		return p
	}
	return m.pos
}

type metaSetter interface {
	setMeta(position, map[string]position)
}

// A Duration is a time.Duration written the way Prometheus and Alertmanager
// write them: "500ms", "10s", "5m", "4h", "1d", "1w", or combinations such
// as "1h30m".
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// parseDuration reads spanwatch's one duration syntax (internal/duration).
func parseDuration(s string) (Duration, error) {
	v, err := duration.Parse(s)
	if err != nil {
		if strings.HasPrefix(s, "-") {
			return 0, fmt.Errorf("negative duration %q", s)
		}
		return 0, fmt.Errorf("invalid duration %q: use a number with a unit (%s), e.g. 500ms, 10s, 5m, 4h, 1d", s, duration.Units)
	}
	return Duration(v), nil
}

var (
	durationType = reflect.TypeFor[Duration]()
	metaType     = reflect.TypeFor[metaSetter]()
)

// decoder decodes YAML nodes into Go values strictly: unknown keys,
// duplicate keys and values of the wrong type are errors that point at the
// node. yaml.v3's Node.Decode cannot reject unknown keys, and its type errors
// lack columns and the file name.
type decoder struct {
	file string
	// aliases and depth bound the work an input can cause: YAML aliases
	// can expand exponentially ("billion laughs") or refer to themselves.
	aliases, depth int
	// errors counts the errors reported; decoding goes on after an error,
	// so that one pass reports every mistake, up to maxErrors.
	errors int
}

const (
	maxAliases = 1000
	maxDepth   = 64
	maxErrors  = 100
)

func (d *decoder) errorf(n *yaml.Node, format string, a ...any) error {
	d.errors++
	return section.Errorf(d.file, n, format, a...)
}

// full reports whether enough errors were found to stop.
func (d *decoder) full() bool { return d.errors >= maxErrors }

// kindName is section.KindName as notify's messages have always said it:
// "got string "x"", without the article.
func kindName(n *yaml.Node) string {
	return strings.TrimPrefix(section.KindName(n), "the ")
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value) error {
	for n.Kind == yaml.AliasNode {
		if d.aliases++; d.aliases > maxAliases || n.Alias == nil {
			return d.errorf(n, "too many YAML aliases: write the values out")
		}
		n = n.Alias
	}
	if d.depth++; d.depth > maxDepth {
		return d.errorf(n, "nested too deeply")
	}
	defer func() { d.depth-- }()
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // leave the zero value: the key might as well be absent
	}
	if v.Type() == durationType {
		if n.Kind != yaml.ScalarNode {
			return d.errorf(n, "expected a duration such as 10s, got %s", kindName(n))
		}
		dur, err := parseDuration(n.Value)
		if err != nil {
			return d.errorf(n, "%v", err)
		}
		v.SetInt(int64(dur))
		return nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return d.decode(n, v.Elem())
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			return d.errorf(n, "expected a string, got %s", kindName(n))
		}
		v.SetString(n.Value)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			return d.errorf(n, "expected true or false, got %s", kindName(n))
		}
		b, err := strconv.ParseBool(n.Value)
		if err != nil {
			return d.errorf(n, "expected true or false, got %q", n.Value)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			return d.errorf(n, "expected an integer, got %s", kindName(n))
		}
		i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err != nil {
			return d.errorf(n, "expected an integer, got %q", n.Value)
		}
		v.SetInt(i)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return d.errorf(n, "expected a list, got %s", kindName(n))
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		var errs []error
		for i, c := range n.Content {
			if err := d.decode(c, s.Index(i)); err != nil {
				if errs = append(errs, err); d.full() {
					break
				}
			}
		}
		v.Set(s)
		return errors.Join(errs...)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return d.errorf(n, "expected a mapping, got %s", kindName(n))
		}
		m := reflect.MakeMap(v.Type())
		var errs []error
		for i := 0; i+1 < len(n.Content) && !d.full(); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				errs = append(errs, d.errorf(k, "expected a string key, got %s", kindName(k)))
				continue
			}
			if m.MapIndex(reflect.ValueOf(k.Value)).IsValid() {
				errs = append(errs, d.errorf(k, "key %q set twice", k.Value))
				continue
			}
			e := reflect.New(v.Type().Elem()).Elem()
			if err := d.decode(val, e); err != nil {
				errs = append(errs, err)
				continue
			}
			m.SetMapIndex(reflect.ValueOf(k.Value), e)
		}
		v.Set(m)
		return errors.Join(errs...)
	case reflect.Struct:
		return d.decodeStruct(n, v)
	default:
		return d.errorf(n, "internal error: cannot decode into %s", v.Type())
	}
	return nil
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value) error {
	if n.Kind != yaml.MappingNode {
		return d.errorf(n, "expected a mapping, got %s", kindName(n))
	}
	t := v.Type()
	byKey := map[string]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); tag != "" && tag != "-" && f.IsExported() {
			byKey[tag] = i
		}
	}
	fields := map[string]position{}
	var errs []error
	for i := 0; i+1 < len(n.Content) && !d.full(); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			errs = append(errs, d.errorf(k, "expected a key, got %s", kindName(k)))
			continue
		}
		idx, ok := byKey[k.Value]
		if !ok {
			known := make([]string, 0, len(byKey))
			for key := range byKey {
				known = append(known, key)
			}
			sort.Strings(known)
			errs = append(errs, d.errorf(k, "unknown key %q (known keys: %s)", k.Value, strings.Join(known, ", ")))
			continue
		}
		if _, dup := fields[k.Value]; dup {
			errs = append(errs, d.errorf(k, "key %q set twice", k.Value))
			continue
		}
		fields[k.Value] = position{k.Line, k.Column}
		if err := d.decode(val, v.Field(idx)); err != nil {
			errs = append(errs, err)
		}
	}
	if v.CanAddr() && v.Addr().Type().Implements(metaType) {
		v.Addr().Interface().(metaSetter).setMeta(position{n.Line, n.Column}, fields)
	}
	return errors.Join(errs...)
}
