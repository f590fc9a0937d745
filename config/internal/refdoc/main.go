// Command refdoc writes docs/configuration.md, the reference of the
// configuration file, from the JSON Schemas its decoders own
// (config.Schema(), notify/schema.json, internal/usdt's and
// internal/tpsource's sources.schema.json) and the hand-written parts in
// configuration.md.in, where a line <!-- keys: SECTION --> stands for the
// generated reference of a top-level section:
//
//	go run ./config/internal/refdoc -o docs/configuration.md
//
// (go generate ./config runs it). It refuses a schema key without a
// description, a top-level section the page does not place, and a marker
// that names no section.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	out := flag.String("o", "", "write the page to this file (default: standard output)")
	root := flag.String("root", "", "the module's root (default: the directory above the working directory holding go.mod)")
	flag.Parse()
	if *root == "" {
		r, err := moduleRoot()
		if err != nil {
			fail(err)
		}
		*root = r
	}
	page, err := render(*root)
	if err != nil {
		fail(err)
	}
	if *out == "" {
		os.Stdout.Write(page)
		return
	}
	if err := os.WriteFile(*out, page, 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "refdoc:", err)
	os.Exit(1)
}

// moduleRoot is the nearest directory at or above the working directory
// that holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("no go.mod at or above the working directory")
		}
		dir = up
	}
}
