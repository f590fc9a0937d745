// Command goemitter emits a slow span through the span SDK every 20 ms:
// a Go program started after an attack, which the /proc scan must find.
package main

import (
	"fmt"
	"time"

	"github.com/spanwatch/spanwatch/emit"
)

func main() {
	fmt.Println("ready")
	for {
		s := emit.Start("hostile.go")
		time.Sleep(5 * time.Millisecond)
		s.End(nil)
		time.Sleep(20 * time.Millisecond)
	}
}
