//go:build linux

package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// rawKeys puts the terminal on f into non-canonical mode without echo,
// so top gets each key as it is pressed, and returns the keys and the
// function that restores the terminal. The reader goroutine ends when f
// does (top exits).
func rawKeys(f *os.File) (<-chan byte, func(), error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, nil, fmt.Errorf("read terminal settings: %w", err)
	}
	raw := *old
	raw.Lflag &^= unix.ICANON | unix.ECHO
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, nil, fmt.Errorf("set terminal to raw: %w", err)
	}
	keys := make(chan byte, 16)
	go func() {
		var b [1]byte
		for {
			n, err := f.Read(b[:])
			if err != nil {
				close(keys)
				return
			}
			if n == 1 {
				keys <- b[0]
			}
		}
	}()
	return keys, func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}
