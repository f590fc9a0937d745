//go:build linux

package userevents

import (
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// RegisterWord is Register with the enable bit in a word the caller owns,
// for callers that fold the enable check into a word of their own (the span
// SDK keeps it beside its uprobe reference counter so that one load tells
// whether anybody listens). word must never move and stay mapped while the
// event is registered: a package variable, never the Go heap.
func RegisterWord(format string, word *uint32, bit uint8) (*Event, error) {
	format = strings.TrimSpace(format)
	name := eventName(format)
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("register user_event from format %q: %w", format, err)
	}
	if bit > 31 {
		return nil, fmt.Errorf("register user_event %s: enable bit %d out of range 0-31", name, bit)
	}
	process.Lock()
	defer process.Unlock()
	if process.fd < 0 {
		fd, err := openData()
		if err != nil {
			return nil, fmt.Errorf("register user_event %s: %w", name, err)
		}
		process.fd = fd
	}
	args := append([]byte(format), 0)
	reg := userReg{
		size:       userRegSize,
		enableBit:  bit,
		enableSize: 4,
		enableAddr: uint64(uintptr(unsafe.Pointer(word))),
		nameArgs:   uint64(uintptr(unsafe.Pointer(&args[0]))),
	}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(process.fd), diagIOCSREG, uintptr(unsafe.Pointer(&reg)))
	runtime.KeepAlive(args)
	if errno != 0 {
		process.closeIfUnused()
		return nil, registerError(format, errno)
	}
	process.refs++
	return &Event{name: name, word: word, mask: 1 << bit, bit: bit, index: reg.writeIndex, fd: process.fd}, nil
}
