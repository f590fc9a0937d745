//go:build linux

package function

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/spanwatch/spanwatch/internal/elfread"
	"github.com/spanwatch/spanwatch/internal/funcs"
	"github.com/spanwatch/spanwatch/internal/userfile"
	"github.com/spanwatch/spanwatch/source"
)

// attachPID traces the functions of a pid: target: the executable the
// process runs, opened through /proc/PID/exe (the very file, as its
// mount namespace has it), or the target's binary inside the process's
// root; its debug file is looked for in that root. The uprobes are
// attached for that process only (perf_event_open's pid: the kernel's
// uprobe filter puts no breakpoint in other processes' memory). A
// process that is gone, or exits later, leaves nothing to trace: its
// uprobes never fire again (they hold its task, not its number, so a
// process reusing the pid is not traced).
func (s *Source) attachPID(ctx context.Context, ti int, t Target) error {
	ctx, cancel := context.WithTimeout(ctx, scanTimeout)
	defer cancel()
	procRoot := s.core.ProcRoot
	if procRoot == "" {
		procRoot = "/proc"
	}
	dir := filepath.Join(procRoot, strconv.Itoa(t.PID))
	on := userfile.OnPID(procRoot, t.PID)
	var (
		fh    *userfile.File
		path  string
		place elfread.DebugPlace
		err   error
	)
	if t.Binary == "" {
		exe, ok := source.Exe(dir)
		if !ok {
			return fmt.Errorf("%s: no process %d running an executable (%s/exe cannot be read)", t.Describe(), t.PID, dir)
		}
		path, place = exe, processPlace(ctx, procRoot, t.PID, exe)
		fh, err = userfile.OpenPath(ctx, filepath.Join(dir, "exe"), userfile.Options{On: on})
	} else {
		root := filepath.Join(dir, "root")
		path = t.Binary
		place = elfread.DebugPlace{Ctx: ctx, Roots: []string{root}, Path: t.Binary, On: on}
		fh, err = userfile.Open(ctx, root, t.Binary, userfile.Options{Symlinks: true, On: on})
	}
	if err != nil {
		return fmt.Errorf("%s: %w", t.Describe(), err)
	}
	defer fh.Close()
	b, err := userfile.Do(ctx, on, func() (*Binary, error) {
		return ParseBinary(fh, funcs.Options{Filter: t.Functions}, place)
	}, (*Binary).Close)
	if err != nil {
		return fmt.Errorf("functions of %s in pid %d: %w", path, t.PID, err)
	}
	defer b.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	links, traced, err := s.attachFile(ti, t, fh, b, path, t.PID)
	s.links = append(s.links, links...)
	s.traced = append(s.traced, traced...)
	if err != nil {
		return fmt.Errorf("pid %d: %w", t.PID, err)
	}
	if len(traced) == 0 {
		list := filepath.Join(dir, "exe")
		if t.Binary != "" {
			list = filepath.Join(dir, "root", t.Binary)
		}
		return fmt.Errorf("functions of %s in pid %d: no traceable function matches %q (spanwatch functions %s lists them)", path, t.PID, t.Functions, list)
	}
	return nil
}
