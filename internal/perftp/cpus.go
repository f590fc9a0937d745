//go:build linux

package perftp

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// parseCPUList reads a CPU list such as "0-3,5".
func parseCPUList(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("%s: bad cpu list %q", path, b)
		}
		z := a
		if isRange {
			if z, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("%s: bad cpu list %q", path, b)
			}
		}
		for c := a; c <= z; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}
