//go:build !linux

package emit

import "errors"

func registerUserEvents() (interface{ Write(...[]byte) error }, error) {
	return nil, errors.New("user_events needs Linux")
}
