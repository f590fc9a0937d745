//go:build !linux

package emit

import "errors"

func registerUserEvents() error { return errors.New("user_events needs Linux") }

func ueWrite([]byte) error { return errors.New("user_events needs Linux") }
