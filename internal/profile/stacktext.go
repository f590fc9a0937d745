package profile

import (
	"fmt"
	"strings"
	"time"

	"github.com/spanwatch/spanwatch/snapshot"
)

// hotFrames is how many of the hottest frames of the in-span samples a
// StackText leads with.
const hotFrames = 3

// StackText is an overrun's stack as text, the one rendering of it that
// alerts (the "stack" annotation) and exported records carry: where the
// span's time went, when it was sampled while it ran (the hottest
// application frames, with their share of the duration), then its
// innermost user frames where it ended (or stood, still running), at
// most maxFrames, without the span SDKs' own frames at the top (the
// overrun record keeps them). "" when there is nothing to show.
func StackText(o *snapshot.Overrun, maxFrames int) string {
	frames, _ := TrimEnd(o.Source, o.UserStack)
	var b strings.Builder
	if hot := Hottest(o.Samples, hotFrames); len(hot) > 0 {
		var n uint64
		for _, s := range o.Samples {
			n += s.Count
		}
		noun := "samples"
		if n == 1 {
			noun = "sample"
		}
		fmt.Fprintf(&b, "where the time went (%d %s, %v of %v):\n%s",
			n, noun, time.Duration(o.SampledNs()).Round(time.Millisecond), time.Duration(o.DurationNs).Round(time.Millisecond),
			FormatHottest(hot, o.DurationNs))
		if len(frames) == 0 {
			return b.String()
		}
		if o.StillRunning {
			b.WriteString("\nrunning at:\n")
		} else {
			b.WriteString("\nended at:\n")
		}
	}
	if len(frames) == 0 {
		return ""
	}
	n := min(len(frames), maxFrames)
	for i, f := range frames[:n] {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(f.String())
	}
	if len(frames) > n {
		fmt.Fprintf(&b, "\n... %d more frames", len(frames)-n)
	}
	return b.String()
}
