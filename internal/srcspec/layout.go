package srcspec

// The layouts of bpf/source.h, mirrored: the tests check them against the
// bpf2go output of bpf/sourcetest.bpf.c.
const (
	MaxOperands = 16   // SRC_OPERANDS
	MaxTerms    = 8    // SRC_PRED_TERMS
	MaxGroups   = 8    // SRC_PRED_GROUPS
	MaxLabels   = 3    // SERIES_LABELS in bpf/aggregate.h
	MaxLabelSet = 4095 // SRC_LABELSETS - 1
	// LabelValues is how many label values one BPF object admits in all
	// (SRC_LABEL_VALUES): the sum of the caps of its sources' labels must
	// fit.
	LabelValues = 65536
)

// Operator bits of a comparison: the orders it accepts (enum src_op).
const (
	opLT = 1
	opEQ = 2
	opGT = 4
)

// Term is struct src_term: one comparison of an operand with a constant.
type Term struct {
	Value   uint64 // the constant, two's complement
	Operand uint8
	Op      uint8 // opLT | opEQ | opGT bits
	Neg     uint8 // the constant is negative
	_       [5]uint8
}

// Pred is struct src_pred: a predicate in disjunctive normal form.
type Pred struct {
	Terms   [MaxTerms]Term
	Group   [MaxGroups]uint8 // bit i: Terms[i] is in the group
	NTerms  uint8
	NGroups uint8 // 0: never holds
	_       [6]uint8
}

// LabelSpec is struct src_labels: which operands label a series.
type LabelSpec struct {
	Labelset uint16 // 0: no labels
	Count    uint8
	Operand  [MaxLabels]uint8
	_        [2]uint8
	Cap      uint32
}
