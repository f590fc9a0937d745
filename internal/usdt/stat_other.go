//go:build !linux

package usdt

import "errors"

type devIno struct{ dev, ino uint64 }

func statDevIno(path string) (devIno, error) {
	return devIno{}, errors.New("process mappings are only supported on Linux")
}
