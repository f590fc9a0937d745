package userfile

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// A Cred is a process's credentials as /proc/PID/status shows them from
// the agent's user namespace (host ids, also for a process in a user
// namespace of its own).
type Cred struct {
	UID    [4]uint32 // real, effective, saved, file system
	GID    [4]uint32
	Groups []uint32
}

// ParseStatus reads the credentials in the text of /proc/PID/status.
func ParseStatus(b []byte) (Cred, error) {
	var c Cred
	var haveUID, haveGID bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		switch key {
		case "Uid", "Gid":
			if len(f) != 4 {
				return Cred{}, fmt.Errorf("parse status: %s: %d fields, want 4", key, len(f))
			}
			var ids [4]uint32
			for i, s := range f {
				n, err := strconv.ParseUint(s, 10, 32)
				if err != nil {
					return Cred{}, fmt.Errorf("parse status: %s: %w", key, err)
				}
				ids[i] = uint32(n)
			}
			if key == "Uid" {
				c.UID, haveUID = ids, true
			} else {
				c.GID, haveGID = ids, true
			}
		case "Groups":
			for _, s := range f {
				n, err := strconv.ParseUint(s, 10, 32)
				if err != nil {
					return Cred{}, fmt.Errorf("parse status: Groups: %w", err)
				}
				c.Groups = append(c.Groups, uint32(n))
			}
		}
	}
	if !haveUID || !haveGID {
		return Cred{}, fmt.Errorf("parse status: no Uid or Gid line")
	}
	return c, nil
}

// Root reports whether the process reads files as root (its file system
// user id is 0 in the agent's user namespace).
func (c *Cred) Root() bool { return c.UID[3] == 0 }

// Owners returns the owners perf(1) accepts for the process's perf map:
// any of its user ids, and root.
func (c *Cred) Owners() []uint32 {
	out := append([]uint32{0}, c.UID[:]...)
	slices.Sort(out)
	return slices.Compact(out)
}

// CanRead reports whether a file of that owner, group and mode is
// readable with these credentials by its permission bits (ACLs and
// capabilities other than root's are not considered: a file the bits do
// not open to the process is not read for it).
func (c *Cred) CanRead(uid, gid, mode uint32) bool {
	if c.Root() {
		return true
	}
	if uid == c.UID[3] {
		return mode&0o400 != 0
	}
	if gid == c.GID[3] || slices.Contains(c.Groups, gid) {
		return mode&0o040 != 0
	}
	return mode&0o004 != 0
}
