// Package ociimage builds spanwatch's container image without a container
// daemon: for each platform, one layer (the static binary and a CA bundle)
// on an empty base, gathered in a multi-platform image index, written as
// an OCI image layout or pushed to a registry. It uses go-containerregistry
// (mutate.AppendLayers onto empty.Image, mutate.AppendManifests onto
// empty.Index).
//
// The image is reproducible: every file in the layer has the same owner
// and time (Config.Created, the commit's time), so the same binaries give
// the same digests.
package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Paths inside the image.
const (
	BinaryPath   = "/usr/bin/spanwatch"
	CABundlePath = "/etc/ssl/certs/ca-certificates.crt"
)

// Entrypoint and Cmd are what the image runs: the agent with the rule file
// the DaemonSet mounts.
var (
	Entrypoint = []string{BinaryPath}
	Cmd        = []string{"run", "--config=/etc/spanwatch/rules.yaml"}
)

// Config says what goes into the image.
type Config struct {
	// Binaries maps a platform ("linux/amd64", "linux/arm64") to the
	// static spanwatch binary built for it. Each binary's ELF machine must
	// be its platform's.
	Binaries map[string]string
	// CABundle is the CA certificates file (for HTTPS webhooks).
	CABundle string
	// Version and Revision label the image (org.opencontainers.image.*).
	Version, Revision string
	// Created is the image's creation time and every file's time: the
	// commit's time keeps digests reproducible.
	Created time.Time
	// Source is the repository's URL, a label.
	Source string
}

// machines maps a GOARCH to the ELF machine its binaries have.
var machines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64,
	"arm64": elf.EM_AARCH64,
}

// Index builds the multi-platform image index: one image per binary,
// in the order of their platforms' names.
func Index(cfg Config) (v1.ImageIndex, error) {
	if len(cfg.Binaries) == 0 {
		return nil, errors.New("no binaries: give one per platform")
	}
	ca, err := os.ReadFile(cfg.CABundle)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	platforms := make([]string, 0, len(cfg.Binaries))
	for p := range cfg.Binaries {
		platforms = append(platforms, p)
	}
	sort.Strings(platforms)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		plat, err := v1.ParsePlatform(p)
		if err != nil || plat.OS != "linux" {
			return nil, fmt.Errorf("platform %q: want linux/ARCH", p)
		}
		img, err := image(cfg, *plat, cfg.Binaries[p], ca)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: plat}})
	}
	return idx, nil
}

// image is one platform's image: the layer on an empty base, and a
// config that runs the agent as root.
func image(cfg Config, plat v1.Platform, binPath string, ca []byte) (v1.Image, error) {
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return nil, err
	}
	if err := checkELF(bin, plat.Architecture); err != nil {
		return nil, fmt.Errorf("%s: %w", binPath, err)
	}
	layerTar, err := layerTar(cfg.Created, bin, ca)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = plat.OS, plat.Architecture, plat.Variant
	cf.Created = v1.Time{Time: cfg.Created.UTC()}
	cf.Config = v1.Config{
		Entrypoint: Entrypoint,
		Cmd:        Cmd,
		// The agent needs root's uid with CAP_BPF, CAP_PERFMON and
		// CAP_SYS_PTRACE (the DaemonSet grants exactly those).
		User:       "0:0",
		Env:        []string{"PATH=/usr/bin"},
		WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.title":    "spanwatch",
			"org.opencontainers.image.version":  cfg.Version,
			"org.opencontainers.image.revision": cfg.Revision,
			"org.opencontainers.image.source":   cfg.Source,
			"org.opencontainers.image.created":  cfg.Created.UTC().Format(time.RFC3339),
		},
	}
	for k, v := range cf.Config.Labels {
		if v == "" {
			delete(cf.Config.Labels, k)
		}
	}
	cf.History = []v1.History{{Created: cf.Created, CreatedBy: "spanwatch deploy/image: " + BinaryPath + " and " + CABundlePath, Comment: cfg.Version}}
	return mutate.ConfigFile(img, cf)
}

// checkELF refuses a binary that is not a static ELF executable for arch.
func checkELF(bin []byte, arch string) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("not an ELF file: %w", err)
	}
	defer f.Close()
	want, ok := machines[arch]
	if !ok {
		return fmt.Errorf("unsupported architecture %q", arch)
	}
	if f.Machine != want {
		return fmt.Errorf("ELF machine %s, want %s for %s", f.Machine, want, arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("the binary has an ELF interpreter: build it with CGO_ENABLED=0 (the image has no libc)")
		}
	}
	return nil
}

// layerTar is the layer's uncompressed tar: the directories, the CA
// bundle and the binary, owned by root, all with time t.
func layerTar(t time.Time, bin, ca []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	t = t.UTC()
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: t, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: t, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, d := range []struct {
		name string
		mode int64
	}{
		{"etc", 0o755}, {"etc/ssl", 0o755}, {"etc/ssl/certs", 0o755},
		// Where the rule file, the outbox and temporary files go: the
		// DaemonSet mounts volumes there.
		{"etc/spanwatch", 0o755}, {"var", 0o755}, {"var/lib", 0o755}, {"var/lib/spanwatch", 0o700},
		{"tmp", 0o1777}, {"usr", 0o755}, {"usr/bin", 0o755},
	} {
		if err := dir(d.name, d.mode); err != nil {
			return nil, err
		}
	}
	if err := file(strings.TrimPrefix(CABundlePath, "/"), 0o644, ca); err != nil {
		return nil, err
	}
	if err := file(strings.TrimPrefix(BinaryPath, "/"), 0o755, bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// RefNameAnnotation names an image of an OCI layout's index.json (what
// "podman run oci:DIR:NAME" and "skopeo copy oci:DIR:NAME" look up).
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// WriteLayout writes idx as an OCI image layout at dir (created, or
// replaced when it holds one), its index.json naming it refName.
func WriteLayout(dir string, idx v1.ImageIndex, refName string) error {
	if _, err := os.Stat(dir + "/oci-layout"); err == nil {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write OCI layout %s: %w", dir, err)
	}
	var opts []layout.Option
	if refName != "" {
		opts = append(opts, layout.WithAnnotations(map[string]string{RefNameAnnotation: refName}))
	}
	if err := p.AppendIndex(idx, opts...); err != nil {
		return fmt.Errorf("write OCI layout %s: %w", dir, err)
	}
	return nil
}

// Push pushes idx to a registry as ref (e.g. ghcr.io/spanwatch/spanwatch:v0.2.0),
// with the credentials docker login and podman login leave
// (authn.DefaultKeychain).
func Push(ctx context.Context, ref string, idx v1.ImageIndex, opts ...remote.Option) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	if err := remote.WriteIndex(r, idx, opts...); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}
