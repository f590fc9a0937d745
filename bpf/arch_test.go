package bpf

import (
	"errors"
	"runtime"
	"testing"
)

func TestCheckArch(t *testing.T) {
	err := CheckArch()
	switch runtime.GOARCH {
	case "amd64", "arm64":
		if err != nil {
			t.Fatalf("CheckArch on %s: %v", runtime.GOARCH, err)
		}
		return
	}
	if !errors.Is(err, ErrUnsupportedArch) {
		t.Fatalf("CheckArch on %s: %v, want ErrUnsupportedArch", runtime.GOARCH, err)
	}
}
