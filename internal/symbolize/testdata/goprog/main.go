// Command goprog is a test program with a known call chain
// main -> a -> b -> c -> d -> slow, where d is inlined into c. slow blocks
// until stdin is closed, so a test can capture the stack while it runs and
// let it exit afterwards.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Println("ready")
	a() // call:main
}

//go:noinline
func a() { b() } // call:a

//go:noinline
func b() { c() } // call:b

//go:noinline
func c() { d() } // call:c

// d is inlined into c.
func d() { slow() } // call:d

//go:noinline
func slow() {
	buf := make([]byte, 1) // line:slow
	for {
		if _, err := os.Stdin.Read(buf); err != nil {
			return
		}
	}
}
