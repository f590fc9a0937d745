package eventheader

import (
	"testing"

	"github.com/spanwatch/spanwatch/bpf"
)

// TestMatchesBPF checks the reference decoder's constants against the BPF
// decoder's (bpf/eventheader.h and eventheader.bpf.c, as bpf2go generates
// them): this package is a pure-Go mirror and cannot take them from there,
// so a value changed on one side only fails here.
func TestMatchesBPF(t *testing.T) {
	for _, c := range []struct {
		name   string
		goV, c uint64
	}{
		{"BufSize", BufSize, uint64(bpf.EventheaderEhLimitsEH_BUF_SIZE)},
		{"MaxFields", MaxFields, uint64(bpf.EventheaderEhLimitsEH_MAX_FIELDS)},
		{"MaxDepth", MaxDepth, uint64(bpf.EventheaderEhLimitsEH_MAX_DEPTH)},
		{"MaxNameLen", MaxNameLen, uint64(bpf.EventheaderEhLimitsEH_MAX_NAME_LEN)},
		{"MaxExtensions", MaxExtensions, uint64(bpf.EventheaderEhLimitsEH_MAX_EXT)},
		{"MaxElements", MaxElements, uint64(bpf.EventheaderEhLimitsEH_MAX_ELEMS)},
		{"MaxWant", MaxWant, uint64(bpf.EventheaderEhLimitsEH_MAX_WANT)},
		{"MaxTimeLen", MaxTimeLen, uint64(bpf.EventheaderEhLimitsEH_TIME_MAX)},

		{"HeaderSize", HeaderSize, uint64(bpf.EventheaderEhFormatEH_HEADER_SIZE)},
		{"FlagLittleEndian", FlagLittleEndian, uint64(bpf.EventheaderEhFormatEH_FLAG_LITTLE_ENDIAN)},
		{"FlagExtension", FlagExtension, uint64(bpf.EventheaderEhFormatEH_FLAG_EXTENSION)},
		{"ExtKindMask", ExtKindMask, uint64(bpf.EventheaderEhFormatEH_EXT_KIND_MASK)},
		{"ExtChainFlag", ExtChainFlag, uint64(bpf.EventheaderEhFormatEH_EXT_CHAIN)},
		{"ExtMetadata", ExtMetadata, uint64(bpf.EventheaderEhFormatEH_EXT_METADATA)},
		{"ExtActivityID", ExtActivityID, uint64(bpf.EventheaderEhFormatEH_EXT_ACTIVITY_ID)},
		{"EncValueMask", EncValueMask, uint64(bpf.EventheaderEhFormatEH_ENC_MASK)},
		{"EncCArrayFlag", EncCArrayFlag, uint64(bpf.EventheaderEhFormatEH_ENC_CARRAY)},
		{"EncVArrayFlag", EncVArrayFlag, uint64(bpf.EventheaderEhFormatEH_ENC_VARRAY)},
		{"EncChainFlag", EncChainFlag, uint64(bpf.EventheaderEhFormatEH_ENC_CHAIN)},
		{"FormatValueMask", FormatValueMask, uint64(bpf.EventheaderEhFormatEH_FMT_MASK)},
		{"FormatChainFlag", FormatChainFlag, uint64(bpf.EventheaderEhFormatEH_FMT_CHAIN)},
		{"FormatSignedInt", FormatSignedInt, uint64(bpf.EventheaderEhFormatEH_FMT_SIGNED_INT)},

		{"EncInvalid", EncInvalid, uint64(bpf.EventheaderEhEncodingEH_ENC_INVALID)},
		{"EncStruct", EncStruct, uint64(bpf.EventheaderEhEncodingEH_ENC_STRUCT)},
		{"EncValue8", EncValue8, uint64(bpf.EventheaderEhEncodingEH_ENC_VALUE8)},
		{"EncValue16", EncValue16, uint64(bpf.EventheaderEhEncodingEH_ENC_VALUE16)},
		{"EncValue32", EncValue32, uint64(bpf.EventheaderEhEncodingEH_ENC_VALUE32)},
		{"EncValue64", EncValue64, uint64(bpf.EventheaderEhEncodingEH_ENC_VALUE64)},
		{"EncValue128", EncValue128, uint64(bpf.EventheaderEhEncodingEH_ENC_VALUE128)},
		{"EncZStringChar8", EncZStringChar8, uint64(bpf.EventheaderEhEncodingEH_ENC_ZSTRING_CHAR8)},
		{"EncZStringChar16", EncZStringChar16, uint64(bpf.EventheaderEhEncodingEH_ENC_ZSTRING_CHAR16)},
		{"EncZStringChar32", EncZStringChar32, uint64(bpf.EventheaderEhEncodingEH_ENC_ZSTRING_CHAR32)},
		{"EncStringLength16Char8", EncStringLength16Char8, uint64(bpf.EventheaderEhEncodingEH_ENC_STRING16CHAR8)},
		{"EncStringLength16Char16", EncStringLength16Char16, uint64(bpf.EventheaderEhEncodingEH_ENC_STRING16CHAR16)},
		{"EncStringLength16Char32", EncStringLength16Char32, uint64(bpf.EventheaderEhEncodingEH_ENC_STRING16CHAR32)},
		{"EncBinaryLength16Char8", EncBinaryLength16Char8, uint64(bpf.EventheaderEhEncodingEH_ENC_BINARY16CHAR8)},
		{"encMax", encMax, uint64(bpf.EventheaderEhEncodingEH_ENC_MAX)},

		{"SpanName", SpanName, uint64(bpf.EventheaderEhSpanFieldEH_SPAN_NAME)},
		{"SpanEnd", SpanEnd, uint64(bpf.EventheaderEhSpanFieldEH_SPAN_END)},
		{"SpanStart", SpanStart, uint64(bpf.EventheaderEhSpanFieldEH_SPAN_START)},
		{"SpanSuccess", SpanSuccess, uint64(bpf.EventheaderEhSpanFieldEH_SPAN_SUCCESS)},
		{"SpanTraceID", SpanTraceID, uint64(bpf.EventheaderEhSpanFieldEH_SPAN_TRACE_ID)},
		{"SpanSpanID", SpanSpanID, uint64(bpf.EventheaderEhSpanFieldEH_SPAN_SPAN_ID)},

		{"OK", uint64(OK), uint64(bpf.EventheaderEhReasonEH_OK)},
		{"ReasonShort", uint64(ReasonShort), uint64(bpf.EventheaderEhReasonEH_SHORT)},
		{"ReasonByteOrder", uint64(ReasonByteOrder), uint64(bpf.EventheaderEhReasonEH_BIG_ENDIAN)},
		{"ReasonNoMetadata", uint64(ReasonNoMetadata), uint64(bpf.EventheaderEhReasonEH_NO_METADATA)},
		{"ReasonBadExtension", uint64(ReasonBadExtension), uint64(bpf.EventheaderEhReasonEH_BAD_EXTENSION)},
		{"ReasonTruncatedMeta", uint64(ReasonTruncatedMeta), uint64(bpf.EventheaderEhReasonEH_TRUNCATED_META)},
		{"ReasonTruncatedData", uint64(ReasonTruncatedData), uint64(bpf.EventheaderEhReasonEH_TRUNCATED_DATA)},
		{"ReasonBadStruct", uint64(ReasonBadStruct), uint64(bpf.EventheaderEhReasonEH_BAD_STRUCT)},
		{"ReasonUnsupported", uint64(ReasonUnsupported), uint64(bpf.EventheaderEhReasonEH_UNSUPPORTED)},
		{"ReasonTooLarge", uint64(ReasonTooLarge), uint64(bpf.EventheaderEhReasonEH_TOO_LARGE)},
		{"ReasonMissingField", uint64(ReasonMissingField), uint64(bpf.EventheaderEhReasonEH_MISSING_FIELD)},
		{"ReasonFieldType", uint64(ReasonFieldType), uint64(bpf.EventheaderEhReasonEH_FIELD_TYPE)},
		{"ReasonBadTime", uint64(ReasonBadTime), uint64(bpf.EventheaderEhReasonEH_BAD_TIME)},
		{"ReasonNegativeDuration", uint64(ReasonNegativeDuration), uint64(bpf.EventheaderEhReasonEH_NEGATIVE_DURATION)},
		{"ReasonBadID", uint64(ReasonBadID), uint64(bpf.EventheaderEhReasonEH_BAD_ID)},
		{"ReasonOtherEvent", uint64(ReasonOtherEvent), uint64(bpf.EventheaderEhReasonEH_OTHER_EVENT)},
		{"ReasonUnpaired", uint64(ReasonUnpaired), uint64(bpf.EventheaderEhReasonEH_UNPAIRED)},
		{"NumReasons", uint64(NumReasons), uint64(bpf.EventheaderEhReasonEH_NUM_REASONS)},
	} {
		if c.goV != c.c {
			t.Errorf("%s is %d in Go, %d in bpf/", c.name, c.goV, c.c)
		}
	}
	if len(SpanFields) != int(bpf.EventheaderEhSpanFieldEH_SPAN_SPAN_ID)+1 {
		t.Errorf("%d SpanFields, the BPF decoder wants %d", len(SpanFields), bpf.EventheaderEhSpanFieldEH_SPAN_SPAN_ID+1)
	}
	var m bpf.EventheaderEhMapping
	if len(SpanFields) > len(m.Want) || MaxWant > len(m.Want) {
		t.Errorf("a mapping wants at most %d fields, SpanFields has %d, MaxWant is %d", len(m.Want), len(SpanFields), MaxWant)
	}
}
