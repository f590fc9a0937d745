// Command goprog is a small Go program for internal/funcs' tests, built by
// the test internally and externally linked, stripped and not.
package main

import (
	"fmt"
	"os"
)

//go:noinline
func work(n int) int {
	if n < 0 {
		return -1
	}
	s := 0
	for i := 0; i < n; i++ {
		s += i * i
	}
	return s
}

func main() {
	fmt.Println(work(len(os.Args) * 10))
}
