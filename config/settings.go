package config

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spanwatch/spanwatch/config/section"
	durationpkg "github.com/spanwatch/spanwatch/internal/duration"
	"github.com/spanwatch/spanwatch/internal/memory"
	"github.com/spanwatch/spanwatch/internal/rotate"
)

// A kind is how a setting is written, in the file and on the command line.
type kind int

const (
	kindDuration    kind = iota // 10s, in spanwatch's one syntax (internal/duration)
	kindDurationOff             // a duration, or a negative one for "off"
	kindInt                     // an integer
	kindSize                    // bytes, or a size with a unit: 512MiB, 1GiB
	kindBool                    // true or false
	kindList                    // a list of strings, or one string
	kindPath                    // a file's path
)

// valueName is how flag usages and docs name a kind's value.
func (k kind) valueName() string {
	switch k {
	case kindDuration, kindDurationOff:
		return "DURATION"
	case kindInt:
		return "N"
	case kindSize:
		return "SIZE"
	case kindList:
		return "NAME"
	case kindPath:
		return "PATH"
	}
	return ""
}

// A setting is one key of a section of plain settings (collector:,
// listener:) and everything that is said of it: the file's key, the
// command line's flag, how it is written, its bounds and default,
// whether a reload applies it, what it does, and the field of S it
// decodes into. Decoding, the command line's flags and their check, the
// JSON Schema, what a reload applies, the docs and shell completion all
// read the one row (settings.go); a new setting is a field and a row.
type setting[S any] struct {
	key  string // the file's key: "max_series"
	flag string // the command line's flag, without dashes; "" for none
	kind kind
	// min and max bound an integer or a size (and a duration, in
	// nanoseconds): both 0 for none. check, when set, is the bounds'
	// check with its own message (the collector's, which New runs too);
	// otherwise a value out of [min, max] is refused with a generic one.
	min, max int64
	check    func(int64) error
	// words are the values a list's items may take; unique refuses an
	// item listed twice; emptyHint refuses an empty list, saying what to
	// do instead. checkItem, when set, checks each item of a list in
	// place of the generic check against words.
	words     []string
	unique    bool
	emptyHint string
	checkItem func(string) error
	// accumulate adds the file's list to the command line's rather than
	// replacing it.
	accumulate bool
	// live: a reload applies a change; otherwise it waits for a restart.
	live bool
	// def is the default, as the docs say it ("10s", "the memory
	// budget's"); doc says what the setting does, as a fragment that
	// reads after the key ("how often a snapshot is taken").
	def, doc string
	// field returns a pointer to the setting's field of s: *time.Duration,
	// *uint32, *int, *uint64, *bool, *[]string or *string.
	field func(s *S) any
}

// value returns the setting's field of s, as a reflect.Value that can be
// set.
func (r *setting[S]) value(s *S) reflect.Value { return reflect.ValueOf(r.field(s)).Elem() }

// checkNumber checks an integer, size or duration (in nanoseconds)
// against the setting's bounds.
func (r *setting[S]) checkNumber(x int64) error {
	if r.check != nil {
		return r.check(x)
	}
	if r.min == 0 && r.max == 0 {
		return nil
	}
	if x < r.min || x > r.max {
		return fmt.Errorf("%s is out of range: want %s to %s (default %s)", r.format(x), r.format(r.min), r.format(r.max), r.def)
	}
	return nil
}

// format writes a number the way the setting is written.
func (r *setting[S]) format(x int64) string {
	switch r.kind {
	case kindDuration, kindDurationOff:
		return time.Duration(x).String()
	case kindSize:
		return memory.FormatBytes(uint64(x))
	}
	return strconv.FormatInt(x, 10)
}

// checkWord checks one item of a list: with checkItem, else against
// words.
func (r *setting[S]) checkWord(s string) error {
	if r.checkItem != nil {
		return r.checkItem(s)
	}
	if len(r.words) > 0 && !slices.Contains(r.words, s) {
		return fmt.Errorf("unknown %s %q: want %s", strings.TrimSuffix(r.key, "s"), s, orList(r.words))
	}
	return nil
}

// orList joins words as "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// A settings is the rows of one section, in the order the file's
// documentation and messages list them.
type settings[S any] struct {
	section string // "collector"
	rows    []*setting[S]
}

func (t *settings[S]) keys() []string {
	out := make([]string, len(t.rows))
	for i, r := range t.rows {
		out[i] = r.key
	}
	return out
}

func (t *settings[S]) row(key string) *setting[S] {
	for _, r := range t.rows {
		if r.key == key {
			return r
		}
	}
	return nil
}

// decoded is a section as written: the values, the keys it sets, and each
// key's value node (for the positions of later checks).
type decoded[S any] struct {
	values S
	set    map[string]bool
	at     map[string]*yaml.Node
}

// decode decodes and checks the section's node n (nil: the file has no
// such section) over defaults, reporting every problem into d at its
// position.
func (t *settings[S]) decode(d *section.Decoder, n *yaml.Node, defaults S) decoded[S] {
	out := decoded[S]{values: defaults, set: map[string]bool{}, at: map[string]*yaml.Node{}}
	if n == nil || n.Kind == 0 {
		return out
	}
	n = section.Resolve(n)
	if section.IsNull(n) {
		return out
	}
	if n.Kind != yaml.MappingNode {
		d.Errorf(n, "%s must be a mapping of settings (%s), not %s", t.section, strings.Join(t.keys(), ", "), section.KindName(n))
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := section.Resolve(n.Content[i]), section.Resolve(n.Content[i+1])
		r := t.row(k.Value)
		if k.Kind != yaml.ScalarNode || r == nil {
			d.Errorf(k, "%s: unknown key %q (known: %s)", t.section, k.Value, strings.Join(t.keys(), ", "))
			continue
		}
		if out.set[k.Value] {
			d.Errorf(k, "%s: %s given twice", t.section, k.Value)
			continue
		}
		out.set[k.Value], out.at[k.Value] = true, v
		t.decodeValue(d, r, v, &out.values)
	}
	return out
}

// decodeValue decodes one setting's value node into its field of s.
func (t *settings[S]) decodeValue(d *section.Decoder, r *setting[S], v *yaml.Node, s *S) {
	bad := func(format string, a ...any) {
		d.Errorf(v, "%s.%s: %s", t.section, r.key, fmt.Sprintf(format, a...))
	}
	f := r.value(s)
	switch r.kind {
	case kindDuration, kindDurationOff:
		if x, ok := durationValue(v, bad, r.kind == kindDurationOff); ok {
			if err := r.checkNumber(int64(x)); err != nil {
				bad("%v", err)
			}
			f.SetInt(int64(x))
		}
	case kindInt:
		if x, ok := integerValue(v, bad); ok {
			if err := r.checkNumber(x); err != nil {
				bad("%v", err)
			} else {
				setInt(f, x)
			}
		}
	case kindSize:
		if x, ok := sizeValue(v, bad); ok {
			if err := r.checkNumber(int64(x)); err != nil {
				bad("%v", err)
			} else {
				f.SetUint(x)
			}
		}
	case kindBool:
		b, _ := boolValue(v, bad)
		f.SetBool(b)
	case kindList:
		list, nodes := stringsValue(d, t.section+"."+r.key, v)
		for i, item := range list {
			if err := r.checkWord(item); err != nil {
				d.Errorf(nodes[i], "%s.%s: %v", t.section, r.key, err)
			}
			if r.unique && slices.Index(list, item) < i {
				d.Errorf(nodes[i], "%s.%s: %s listed twice", t.section, r.key, item)
			}
		}
		if r.emptyHint != "" && v.Kind == yaml.SequenceNode && len(v.Content) == 0 {
			bad("empty list: %s", r.emptyHint)
		}
		f.Set(reflect.ValueOf(list))
	case kindPath:
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" || v.Value == "" {
			bad("want the path of a file, not %s", section.KindName(v))
			return
		}
		f.SetString(v.Value)
	}
}

func setInt(f reflect.Value, x int64) {
	if f.CanUint() {
		f.SetUint(uint64(x))
	} else {
		f.SetInt(x)
	}
}

// number returns the numeric field of s as an int64 (durations in
// nanoseconds).
func (r *setting[S]) number(s *S) int64 {
	f := r.value(s)
	if f.CanUint() {
		return int64(f.Uint())
	}
	return f.Int()
}

// merge lays the file's settings over base (defaults and flags), except
// for the keys the command line set (flags), which win; accumulating
// lists add up.
func (t *settings[S]) merge(base S, flags map[string]string, file decoded[S]) S {
	out := base
	for _, r := range t.rows {
		dst, src := r.value(&out), r.value(&file.values)
		switch {
		case r.accumulate:
			both := append(slices.Clone(*r.field(&base).(*[]string)), *r.field(&file.values).(*[]string)...)
			dst.Set(reflect.ValueOf(both))
		case file.set[r.key] && flags[r.key] == "":
			dst.Set(src)
		}
	}
	return out
}

// checkFlags validates the values the command line set, by the file's
// rules; flags maps each key to the flag that set it.
func (t *settings[S]) checkFlags(d *section.Decoder, s *S, flags map[string]string) {
	for _, r := range t.rows {
		flag := flags[r.key]
		if flag == "" {
			continue
		}
		var err error
		switch r.kind {
		case kindDuration, kindDurationOff, kindInt, kindSize:
			err = r.checkNumber(r.number(s))
		case kindList:
			for _, item := range *r.field(s).(*[]string) {
				if err == nil {
					err = r.checkWord(item)
				}
			}
		}
		if err != nil {
			d.Flag("%s: %v", flag, err)
		}
	}
}

// A RestartChange is a setting that differs between the running agent and
// its configuration file, and that only a restart applies.
type RestartChange struct {
	Key string `json:"key"` // e.g. "collector.max_series"
	// Old is what runs, New what the file says.
	Old string `json:"running"`
	New string `json:"file"`
}

func (c RestartChange) String() string {
	return fmt.Sprintf("%s: %s -> %s", c.Key, c.Old, c.New)
}

// restartChanges lists the settings that are not live and differ between
// running and next.
func (t *settings[S]) restartChanges(running, next *S) []RestartChange {
	var out []RestartChange
	for _, r := range t.rows {
		if r.live {
			continue
		}
		x, y := r.value(running).Interface(), r.value(next).Interface()
		if !reflect.DeepEqual(x, y) {
			out = append(out, RestartChange{Key: t.section + "." + r.key, Old: show(x), New: show(y)})
		}
	}
	return out
}

// keepRunning returns running with next's live settings: what runs after
// a reload that some of the section waits on.
func (t *settings[S]) keepRunning(running, next S) S {
	out := running
	for _, r := range t.rows {
		if r.live {
			r.value(&out).Set(r.value(&next))
		}
	}
	return out
}

func show(v any) string {
	switch x := v.(type) {
	case []string:
		if len(x) == 0 {
			return "[]"
		}
		return "[" + strings.Join(x, ", ") + "]"
	case uint32:
		if x == 0 {
			return "default"
		}
	}
	return fmt.Sprint(v)
}

// durationValue reads a duration in spanwatch's one syntax. negative
// allows a leading '-' (a setting that means "off" when negative).
func durationValue(n *yaml.Node, bad func(string, ...any), negative bool) (time.Duration, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		bad("want a duration such as 10s, not %s", section.KindName(n))
		return 0, false
	}
	s, neg := n.Value, false
	if negative {
		s, neg = strings.CutPrefix(s, "-")
	}
	d, err := durationpkg.Parse(s)
	if err == nil {
		if neg {
			d = -d
		}
		return d, true
	}
	if _, err := strconv.ParseFloat(n.Value, 64); err == nil {
		bad("%s has no unit: write it with one, e.g. %ss", n.Value, n.Value)
		return 0, false
	}
	if strings.HasPrefix(n.Value, "-") {
		bad("%v", err)
		return 0, false
	}
	bad("bad duration %q: use a number with a unit (%s), e.g. 500ms, 10s, 5m, 1d", n.Value, durationpkg.Units)
	return 0, false
}

func integerValue(n *yaml.Node, bad func(string, ...any)) (int64, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		bad("want an integer, not %s", section.KindName(n))
		return 0, false
	}
	x, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	if err != nil {
		bad("integer %s out of range", n.Value)
		return 0, false
	}
	return x, true
}

// sizeValue reads a size: a number of bytes, or one with a unit (512MiB,
// 1GiB, 500MB, 2G), as --output-max-size takes them.
func sizeValue(n *yaml.Node, bad func(string, ...any)) (uint64, bool) {
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!str") {
		bad("want a size such as 512MiB or 1GiB, not %s", section.KindName(n))
		return 0, false
	}
	v, err := rotate.ParseSize(n.Value)
	if err != nil {
		bad("%v", err)
		return 0, false
	}
	if v <= 0 {
		bad("must be positive, not %s", n.Value)
		return 0, false
	}
	return uint64(v), true
}

func boolValue(n *yaml.Node, bad func(string, ...any)) (bool, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		bad("want true or false, not %s", section.KindName(n))
		return false, false
	}
	b, err := strconv.ParseBool(n.Value)
	if err != nil {
		// YAML 1.1 spellings (yes, on) are tagged !!bool by yaml.v3 only
		// in some forms; refuse what strconv does not read.
		bad("want true or false, not %q", n.Value)
		return false, false
	}
	return b, true
}

// stringsValue reads a list of strings, or one string; it returns the
// nodes too, for the positions of their errors. what names the setting in
// messages ("collector.binaries").
func stringsValue(d *section.Decoder, what string, n *yaml.Node) ([]string, []*yaml.Node) {
	var items []*yaml.Node
	switch n.Kind {
	case yaml.SequenceNode:
		items = n.Content
	case yaml.ScalarNode:
		if n.ShortTag() != "!!null" {
			items = []*yaml.Node{n}
		}
	default:
		d.Errorf(n, "%s: want a list of strings, not %s", what, section.KindName(n))
		return nil, nil
	}
	var out []string
	var nodes []*yaml.Node
	for _, it := range items {
		it = section.Resolve(it)
		if it.Kind != yaml.ScalarNode || it.ShortTag() == "!!null" {
			d.Errorf(it, "%s: want a string, not %s", what, section.KindName(it))
			continue
		}
		out = append(out, it.Value)
		nodes = append(nodes, it)
	}
	return out, nodes
}
