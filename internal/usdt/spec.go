//go:build 386 || amd64 || arm64

package usdt

import (
	"fmt"

	"github.com/spanwatch/spanwatch/bpf"
)

// Constants of bpf/usdt.h and bpf/source.h, generated from their enums.
const (
	// noArg marks an unused argument index in struct usdt_source
	// (SRC_NO_ARG).
	noArg = uint8(bpf.UsdtSrcIndexSRC_NO_ARG)
	// noIndex marks an argument without an index register
	// (USDT_NO_INDEX).
	noIndex = uint16(bpf.UsdtUsdtSizesUSDT_NO_INDEX)
)

// bpfSpec encodes a call site's arguments as the struct usdt_spec that
// bpf/usdt.h reads, for the span source with index source.
func bpfSpec(args []Arg, source uint32) (bpf.UsdtUsdtSpec, error) {
	var s bpf.UsdtUsdtSpec
	if len(args) > MaxArgs {
		return s, fmt.Errorf("%d arguments, more than %d", len(args), MaxArgs)
	}
	s.Source = source
	s.ArgCnt = uint16(len(args))
	for i, a := range args {
		as := bpf.UsdtUsdtArgSpec{
			ValOff:   a.Offset,
			RegOff:   a.RegOffset,
			IdxOff:   noIndex,
			Kind:     uint8(a.Kind),
			Size:     uint8(a.Size),
			IsSigned: 0,
		}
		if a.Signed {
			as.IsSigned = 1
		}
		if a.Index != "" {
			as.IdxOff = a.IndexOffset
			switch a.Scale {
			case 1:
				as.ScaleShift = 0
			case 2:
				as.ScaleShift = 1
			case 4:
				as.ScaleShift = 2
			case 8:
				as.ScaleShift = 3
			default:
				return s, fmt.Errorf("argument %d: scale %d", i, a.Scale)
			}
		}
		switch a.Kind {
		case ArgConst, ArgReg, ArgDeref:
		default:
			return s, fmt.Errorf("argument %d: unknown kind %d", i, a.Kind)
		}
		s.Args[i] = as
	}
	return s, nil
}
