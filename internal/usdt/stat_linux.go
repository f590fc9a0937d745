package usdt

import (
	"fmt"
	"syscall"
)

type devIno struct{ dev, ino uint64 }

func statDevIno(path string) (devIno, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return devIno{}, fmt.Errorf("stat %s: %w", path, err)
	}
	return devIno{dev: uint64(st.Dev), ino: st.Ino}, nil
}
