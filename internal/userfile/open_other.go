//go:build !linux

package userfile

import (
	"context"
	"errors"
)

// Open is Linux-only.
func Open(context.Context, string, string, Options) (*File, error) {
	return nil, errors.ErrUnsupported
}

// OpenPath is Linux-only.
func OpenPath(context.Context, string, Options) (*File, error) {
	return nil, errors.ErrUnsupported
}

// ReadFile is Linux-only.
func ReadFile(context.Context, string, string, Options, int64) ([]byte, bool, error) {
	return nil, false, errors.ErrUnsupported
}

// StatPath is Linux-only.
func StatPath(context.Context, string, string) (Info, error) {
	return Info{}, errors.ErrUnsupported
}

// OpenRooted is Linux-only.
func OpenRooted(context.Context, string, Options) (*File, error) {
	return nil, errors.ErrUnsupported
}

// ReadFileChanged is Linux-only.
func ReadFileChanged(context.Context, string, string, Options, int64, func(Info) bool) ([]byte, bool, Info, error) {
	return nil, false, Info{}, errors.ErrUnsupported
}
