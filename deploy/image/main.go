// Command image builds spanwatch's multi-platform container image from
// static binaries, without a container daemon (package
// internal/ociimage), and writes it as an OCI image layout, pushes it to a
// registry, or both. deploy/release.sh runs it:
//
//	go run ./deploy/image --binary linux/amd64=spanwatch-linux-amd64 \
//	    --binary linux/arm64=spanwatch-linux-arm64 \
//	    --version v0.2.0 --revision "$(git rev-parse HEAD)" \
//	    --created "$(git log -1 --format=%cI)" --out image.oci
//
// It prints the index's digest and each platform's image digest.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spanwatch/spanwatch/internal/ociimage"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	cfg := ociimage.Config{Binaries: map[string]string{}}
	fs.Func("binary", "`PLATFORM=PATH`: the static binary for linux/amd64 or linux/arm64 (repeat)", func(s string) error {
		p, path, ok := strings.Cut(s, "=")
		if !ok {
			return errors.New("want PLATFORM=PATH")
		}
		cfg.Binaries[p] = path
		return nil
	})
	fs.StringVar(&cfg.CABundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "the CA certificates `FILE` for HTTPS webhooks")
	fs.StringVar(&cfg.Version, "version", "", "the version label")
	fs.StringVar(&cfg.Revision, "revision", "", "the source revision label")
	fs.StringVar(&cfg.Source, "source", "https://github.com/spanwatch/spanwatch", "the source repository label")
	created := fs.String("created", "", "the image's and its files' `TIME` (RFC 3339; the commit's time keeps digests reproducible)")
	out := fs.String("out", "", "write an OCI image layout to `DIR`")
	refName := fs.String("ref-name", "", "the `NAME` of the image in the layout's index.json (podman run oci:DIR:NAME); default the version")
	push := fs.String("push", "", "push the index to `REF` (e.g. ghcr.io/spanwatch/spanwatch:v0.2.0), with docker's or podman's login")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *out == "" && *push == "" {
		return errors.New("give --out DIR, --push REF or both")
	}
	if *created != "" {
		t, err := time.Parse(time.RFC3339, *created)
		if err != nil {
			return fmt.Errorf("--created: %w", err)
		}
		cfg.Created = t
	}
	idx, err := ociimage.Index(cfg)
	if err != nil {
		return err
	}
	if *out != "" {
		name := *refName
		if name == "" {
			name = cfg.Version
		}
		if err := ociimage.WriteLayout(*out, idx, name); err != nil {
			return err
		}
	}
	if *push != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		if err := ociimage.Push(ctx, *push, idx); err != nil {
			return err
		}
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	fmt.Printf("index %s\n", d)
	for _, desc := range m.Manifests {
		fmt.Printf("  %s %s\n", desc.Platform, desc.Digest)
	}
	if *out != "" {
		fmt.Printf("OCI layout %s\n", *out)
	}
	if *push != "" {
		fmt.Printf("pushed %s@%s\n", *push, d)
	}
	return nil
}
