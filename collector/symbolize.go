//go:build linux

package collector

import (
	"github.com/spanwatch/spanwatch/internal/symbolize"
	"github.com/spanwatch/spanwatch/internal/userfile"
	"github.com/spanwatch/spanwatch/snapshot"
)

// An anchorer names frames of processes that exited before their maps were
// read, in binaries the collector traces (see symbolize.Anchor);
// *symbolize.Symbolizer is one.
type anchorer interface {
	AddAnchor(symbolize.Anchor) error
	RemoveAnchor(dev, ino uint64) error
}

// addAnchor tells the symbolizer, when it takes anchors, that a binary
// has a probe site (see symbolize.Anchor).
func addAnchor(cfg Config, an symbolize.Anchor) {
	a, ok := cfg.Symbolizer.(anchorer)
	if !ok {
		return
	}
	if err := a.AddAnchor(an); err != nil {
		cfg.Logger.Debug("symbolize_anchor_failed", "binary", an.Path, "error", err)
	}
}

// removeAnchor tells the symbolizer that the binary with device dev and
// inode ino is no longer traced, so it may close it.
func removeAnchor(cfg Config, dev, ino uint64) {
	a, ok := cfg.Symbolizer.(anchorer)
	if !ok {
		return
	}
	if err := a.RemoveAnchor(dev, ino); err != nil {
		cfg.Logger.Debug("symbolize_anchor_remove_failed", "error", err)
	}
}

// A memoryUser says how much memory it takes; *symbolize.Symbolizer is one.
type memoryUser interface {
	Memory() int64
}

// userFiles adds the window's counts of users' files refused or read in
// part (internal/userfile: the symbolizer's, the /proc scan's, the USDT
// tracer's, all in the process), and the symbolizer's memory. c.mu is
// held.
func (c *Collector) userFiles(st *snapshot.Stats) {
	now := userfile.Counts()
	for k, v := range now {
		if d := v - c.prevFiles[k]; d > 0 {
			if st.UserFiles == nil {
				st.UserFiles = map[string]uint64{}
			}
			st.UserFiles[k] = d
		}
	}
	c.prevFiles = now
	if m, ok := c.cfg.Symbolizer.(memoryUser); ok {
		st.SymbolizerBytes = uint64(max(0, m.Memory()))
	}
}
