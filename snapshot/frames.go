package snapshot

import (
	"fmt"
	"strings"
)

// TopFrames renders the innermost n frames of a stack, one per line, for
// alert annotations and logs; a last line counts the frames left out. It
// returns "" for an empty stack.
func TopFrames(frames []Frame, n int) string {
	if len(frames) == 0 || n <= 0 {
		return ""
	}
	var b strings.Builder
	for i, f := range frames {
		if i == n {
			fmt.Fprintf(&b, "\n... %d more", len(frames)-n)
			break
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(f.String())
	}
	return b.String()
}
