package bpf

import (
	"errors"
	"runtime"
	"testing"
)

func TestCheckArch(t *testing.T) {
	err := CheckArch()
	if runtime.GOARCH == "amd64" {
		if err != nil {
			t.Fatalf("CheckArch on amd64: %v", err)
		}
		return
	}
	if !errors.Is(err, ErrUnsupportedArch) {
		t.Fatalf("CheckArch on %s: %v, want ErrUnsupportedArch", runtime.GOARCH, err)
	}
}
