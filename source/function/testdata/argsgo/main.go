// Command argsgo is the Go program of TestArgsGo: handle(code, path) is
// called with every (code, path) pair equally often, and returns a
// non-nil error for the 503s.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
)

var (
	codes          = []int{200, 404, 503}
	paths          = []string{"/checkout", "/cart", "/a/route/longer/than/the/sixty-four/bytes/a/string/label/keeps/xxxxxx"}
	errUnavailable = errors.New("unavailable")
)

// Its results are named: TestParamsGo's error: reads err by name.
//
//go:noinline
func handle(code int, path string) (n int, err error) {
	if code >= 500 {
		return 0, errUnavailable
	}
	return len(path) + code, nil
}

func main() {
	n, _ := strconv.Atoi(os.Args[1])
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
	fmt.Println("done", serve(n) > 0)
}

// serve makes the calls: the caller an overrun's stack must show between
// handle and main.main.
//
//go:noinline
func serve(n int) int {
	sink := 0
	for i := 0; i < n; i++ {
		v, err := handle(codes[i%3], paths[(i/3)%3])
		if err == nil {
			sink += v
		}
	}
	return sink
}
