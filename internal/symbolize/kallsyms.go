package symbolize

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// ErrKernelHidden is returned when /proc/kallsyms shows only zero
// addresses: kernel.kptr_restrict hides them from a reader without
// CAP_SYSLOG.
var ErrKernelHidden = errors.New("kernel addresses are hidden in /proc/kallsyms")

// kallsyms is the kernel's text symbols, sorted by address.
type kallsyms struct {
	syms    []ksym
	modules []string
	text    uint64 // _text, the kernel image's base
}

type ksym struct {
	addr   uint64
	name   string
	module int32 // index into modules; -1 for the kernel image
}

func readKallsyms(path string) (*kallsyms, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read kallsyms: %w", err)
	}
	return parseKallsyms(b)
}

func parseKallsyms(b []byte) (*kallsyms, error) {
	k := &kallsyms{}
	modIndex := map[string]int32{}
	nonzero := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// ffffffff81000000 T _text
		// ffffffffc0a01000 t ext4_foo	[ext4]
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		switch f[1] {
		case "t", "T", "w", "W":
		default:
			continue
		}
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			return nil, fmt.Errorf("parse kallsyms line %q: %w", sc.Text(), err)
		}
		if addr != 0 {
			nonzero = true
		}
		mod := int32(-1)
		if len(f) >= 4 {
			name := strings.Trim(f[3], "[]")
			n, ok := modIndex[name]
			if !ok {
				n = int32(len(k.modules))
				k.modules = append(k.modules, name)
				modIndex[name] = n
			}
			mod = n
		}
		if f[2] == "_text" && mod < 0 {
			k.text = addr
		}
		k.syms = append(k.syms, ksym{addr: addr, name: f[2], module: mod})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read kallsyms: %w", err)
	}
	if !nonzero {
		// kallsyms shows addresses to CAP_SYSLOG, or to anyone when
		// kptr_restrict is 0 and perf_event_paranoid at most 1.
		restrict, _ := os.ReadFile("/proc/sys/kernel/kptr_restrict")
		paranoid, _ := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
		return nil, fmt.Errorf("%w (kernel.kptr_restrict=%s, kernel.perf_event_paranoid=%s): run spanwatch with CAP_SYSLOG "+
			"(or set kernel.kptr_restrict=0 and kernel.perf_event_paranoid=1) to name kernel frames",
			ErrKernelHidden, strings.TrimSpace(string(restrict)), strings.TrimSpace(string(paranoid)))
	}
	sort.SliceStable(k.syms, func(i, j int) bool { return k.syms[i].addr < k.syms[j].addr })
	return k, nil
}

// lookup returns the symbol holding addr. kallsyms has no sizes, so an
// address belongs to the closest symbol below it, as perf and the kernel's
// own stack traces assume.
func (k *kallsyms) lookup(addr uint64) (ksym, bool) {
	i := sort.Search(len(k.syms), func(i int) bool { return k.syms[i].addr > addr }) - 1
	if i < 0 {
		return ksym{}, false
	}
	return k.syms[i], true
}

func (k *kallsyms) moduleName(s ksym) string {
	if s.module < 0 {
		return "kernel"
	}
	return k.modules[s.module]
}
