//go:build linux

package srcspec

import (
	"encoding/binary"
	"errors"
	"math/rand"
	"os"
	"reflect"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/internal/bpftest"
	"github.com/spanwatch/spanwatch/internal/kernel"
)

// sameLayout fails unless a and b (struct types) have the same size and
// their fields, in order, the same offsets, sizes and kinds: the Go mirror
// agrees with the C struct bpf2go saw.
func sameLayout(t *testing.T, a, b reflect.Type) {
	t.Helper()
	if a.Size() != b.Size() {
		t.Fatalf("%s is %d bytes, %s %d", a, a.Size(), b, b.Size())
	}
	var fa, fb []reflect.StructField
	for i := 0; i < a.NumField(); i++ {
		if f := a.Field(i); f.Type.Size() > 0 {
			fa = append(fa, f)
		}
	}
	for i := 0; i < b.NumField(); i++ {
		if f := b.Field(i); f.Type.Size() > 0 {
			fb = append(fb, f)
		}
	}
	if len(fa) != len(fb) {
		t.Fatalf("%s has %d fields, %s %d", a, len(fa), b, len(fb))
	}
	for i := range fa {
		x, y := fa[i], fb[i]
		if x.Offset != y.Offset || x.Type.Size() != y.Type.Size() || x.Type.Kind() != y.Type.Kind() {
			t.Fatalf("%s.%s (offset %d, %d bytes) against %s.%s (offset %d, %d bytes)", a, x.Name, x.Offset, x.Type.Size(), b, y.Name, y.Offset, y.Type.Size())
		}
		switch x.Type.Kind() {
		case reflect.Struct:
			sameLayout(t, x.Type, y.Type)
		case reflect.Array:
			if x.Type.Elem().Kind() == reflect.Struct {
				sameLayout(t, x.Type.Elem(), y.Type.Elem())
			}
		}
	}
}

func TestLayoutMatchesBPF(t *testing.T) {
	sameLayout(t, reflect.TypeOf(Term{}), reflect.TypeOf(bpf.SourcetestSrcTerm{}))
	sameLayout(t, reflect.TypeOf(Pred{}), reflect.TypeOf(bpf.SourcetestSrcPred{}))
	sameLayout(t, reflect.TypeOf(LabelSpec{}), reflect.TypeOf(bpf.SourcetestSrcLabels{}))
	sameLayout(t, reflect.TypeOf(Values{}), reflect.TypeOf(bpf.SourcetestSrcOperands{}))
	for _, c := range []struct{ got, want int }{
		{MaxOperands, int(bpf.SourcetestSrcSizesSRC_OPERANDS)},
		{MaxTerms, int(bpf.SourcetestSrcSizesSRC_PRED_TERMS)},
		{MaxGroups, int(bpf.SourcetestSrcSizesSRC_PRED_GROUPS)},
		{MaxLabelSet + 1, int(bpf.SourcetestSrcSizesSRC_LABELSETS)},
		{LabelValues, int(bpf.SourcetestSrcSizesSRC_LABEL_VALUES)},
		{opLT, int(bpf.SourcetestSrcOpSRC_OP_LT)},
		{opEQ, int(bpf.SourcetestSrcOpSRC_OP_EQ)},
		{opGT, int(bpf.SourcetestSrcOpSRC_OP_GT)},
	} {
		if c.got != c.want {
			t.Errorf("Go constant %d, C %d", c.got, c.want)
		}
	}
}

// sourceTest is bpf/sourcetest.bpf.c loaded on its own.
type sourceTest struct {
	objs struct {
		SourcetestRun    *ebpf.Program `ebpf:"sourcetest_run"`
		SourcetestInput  *ebpf.Map     `ebpf:"sourcetest_input"`
		SourcetestOutput *ebpf.Map     `ebpf:"sourcetest_output"`
		SrcCounters      *ebpf.Map     `ebpf:"src_counters"`
	}
}

func loadSourceTest(t *testing.T) *sourceTest {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF) to load BPF")
	}
	// The test object runs its cases with bpf_loop; the compat USDT
	// objects use the same predicates and labels without it (collector's
	// USDT tests run them on 5.10).
	bpftest.Require(t, kernel.Loop, kernel.Atomics)
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	spec, err := bpf.LoadSourcetest()
	if err != nil {
		t.Fatal(err)
	}
	// The test program uses none of the core's maps: leave them out.
	for _, name := range bpf.CoreMaps {
		delete(spec.Maps, name)
	}
	st := &sourceTest{}
	if err := spec.LoadAndAssign(&st.objs, nil); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			t.Fatalf("load sourcetest: %+v", verr)
		}
		t.Fatalf("load sourcetest: %v", err)
	}
	t.Cleanup(func() {
		st.objs.SourcetestRun.Close()
		st.objs.SourcetestInput.Close()
		st.objs.SourcetestOutput.Close()
		st.objs.SrcCounters.Close()
	})
	return st
}

type testIn struct {
	pred   Pred
	ops    Values
	labels LabelSpec
}

// run evaluates inputs in the kernel and returns its outputs.
func (st *sourceTest) run(t *testing.T, ins []testIn) []bpf.SourcetestSourcetestOut {
	t.Helper()
	keys := make([]uint32, len(ins))
	vals := make([]bpf.SourcetestSourcetestIn, len(ins))
	for i, in := range ins {
		keys[i] = uint32(i)
		vals[i].Pred = *(*bpf.SourcetestSrcPred)(unsafe.Pointer(&in.pred))
		vals[i].Ops = *(*bpf.SourcetestSrcOperands)(unsafe.Pointer(&in.ops))
		vals[i].Labels = *(*bpf.SourcetestSrcLabels)(unsafe.Pointer(&in.labels))
	}
	if _, err := st.objs.SourcetestInput.BatchUpdate(keys, vals, nil); err != nil {
		t.Fatal(err)
	}
	ctx := make([]byte, 8)
	binary.LittleEndian.PutUint64(ctx, uint64(len(ins)))
	if _, err := st.objs.SourcetestRun.Run(&ebpf.RunOptions{Context: ctx}); err != nil {
		t.Fatal(err)
	}
	out := make([]bpf.SourcetestSourcetestOut, len(ins))
	for i := range out {
		if err := st.objs.SourcetestOutput.Lookup(uint32(i), &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestPredicateInBPF holds the kernel's src_pred_holds against Eval for
// random predicates (signed and unsigned operands, constants at the edges
// of both ranges, unread operands).
func TestPredicateInBPF(t *testing.T) {
	st := loadSourceTest(t)
	rng := rand.New(rand.NewSource(2))
	var ins []testIn
	var preds []*Predicate
	for len(ins) < 20000 {
		p, err := ParsePredicate(randomPredicate(rng, 1+rng.Intn(5)), argResolver)
		if err != nil {
			continue
		}
		for j := 0; j < 20; j++ {
			ins = append(ins, testIn{pred: p.Encode(), ops: randomValues(rng)})
			preds = append(preds, p)
		}
	}
	out := st.run(t, ins)
	holds := 0
	for i, o := range out {
		want := preds[i].Eval(&ins[i].ops)
		if (o.Holds != 0) != want {
			t.Fatalf("%q (compiled %s) with %+v: kernel says %v, Go %v", preds[i].Text, preds[i], ins[i].ops, o.Holds != 0, want)
		}
		if want {
			holds++
		}
	}
	if holds < len(out)/10 || holds > len(out)*9/10 {
		t.Errorf("%d of %d hold: the random cases do not exercise both answers", holds, len(out))
	}
}

// TestLabelCapInBPF checks label capping: the first cap distinct values of
// each label are kept, in the order they come, and stay kept; later ones
// are keyed other; an unread operand is keyed other; label sets count
// apart.
func TestLabelCapInBPF(t *testing.T) {
	st := loadSourceTest(t)
	spec := Labels{List: []Label{{"status", 0, "arg0"}, {"m", 1, "arg1"}}, Cap: 3}.Encode(5)
	other := Labels{List: []Label{{"status", 0, "arg0"}}, Cap: 1}.Encode(6)
	vals := func(a, b uint64, readB bool) Values {
		var v Values
		v.Set(0, a, false)
		if readB {
			v.Set(1, b, true)
		}
		return v
	}
	ins := []testIn{
		{labels: spec, ops: vals(200, 1, true)},
		{labels: spec, ops: vals(404, 1, true)},
		{labels: spec, ops: vals(500, 2, true)},
		{labels: spec, ops: vals(503, 3, true)},  // status past the cap
		{labels: spec, ops: vals(200, 4, true)},  // m past the cap
		{labels: spec, ops: vals(404, 2, false)}, // m unread
		{labels: other, ops: vals(503, 0, false)},
		{labels: other, ops: vals(200, 0, false)},
		{labels: spec, ops: vals(500, 3, true)},
		{labels: LabelSpec{}, ops: vals(1, 1, true)},
	}
	out := st.run(t, ins)
	want := []struct {
		labels   [3]uint64
		labelset uint16
		other    uint8
	}{
		{[3]uint64{200, 1}, 5, 0},
		{[3]uint64{404, 1}, 5, 0},
		{[3]uint64{500, 2}, 5, 0},
		{[3]uint64{0, 3}, 5, 1},
		{[3]uint64{200, 0}, 5, 2},
		{[3]uint64{404, 0}, 5, 2},
		{[3]uint64{503}, 6, 0},
		{[3]uint64{0}, 6, 1},
		{[3]uint64{500, 3}, 5, 0},
		{[3]uint64{}, 0, 0},
	}
	for i, w := range want {
		o := out[i]
		if o.Labels != w.labels || o.Labelset != w.labelset || o.Other != w.other {
			t.Errorf("input %d: labels %v set %d other %b, want %v set %d other %b", i, o.Labels, o.Labelset, o.Other, w.labels, w.labelset, w.other)
		}
	}
	// Counted: 2 values past a cap, 1 unread.
	var counts []uint64
	sum := func(idx uint32) uint64 {
		if err := st.objs.SrcCounters.Lookup(idx, &counts); err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, c := range counts {
			n += c
		}
		return n
	}
	if got := sum(uint32(bpf.SourcetestSrcCounterSRC_COUNTER_LABEL_OTHER)); got != 3 {
		t.Errorf("%d values counted past their cap, want 3", got)
	}
	if got := sum(uint32(bpf.SourcetestSrcCounterSRC_COUNTER_LABEL_UNREAD)); got != 1 {
		t.Errorf("%d unread label values counted, want 1", got)
	}
}
