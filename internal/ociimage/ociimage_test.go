package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// elfFile is a minimal ELF64 executable header for machine, with a
// PT_INTERP program header when dynamic: what checkELF reads.
func elfFile(machine elf.Machine, dynamic bool) []byte {
	var b bytes.Buffer
	ident := [16]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)}
	phnum := uint16(0)
	if dynamic {
		phnum = 1
	}
	hdr := elf.Header64{Ident: ident, Type: uint16(elf.ET_EXEC), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Phoff: 64, Ehsize: 64, Phentsize: 56, Phnum: phnum, Shentsize: 64}
	binary.Write(&b, binary.LittleEndian, hdr)
	if dynamic {
		binary.Write(&b, binary.LittleEndian, elf.Prog64{Type: uint32(elf.PT_INTERP), Off: 120, Filesz: 1, Memsz: 1})
		b.WriteByte(0)
	}
	b.WriteString("spanwatch " + machine.String())
	return b.Bytes()
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func testConfig(t *testing.T) Config {
	dir := t.TempDir()
	return Config{
		Binaries: map[string]string{
			"linux/amd64": writeFile(t, dir, "amd64", elfFile(elf.EM_X86_64, false)),
			"linux/arm64": writeFile(t, dir, "arm64", elfFile(elf.EM_AARCH64, false)),
		},
		CABundle: writeFile(t, dir, "ca.crt", []byte("-----BEGIN CERTIFICATE-----\n")),
		Version:  "v9.8.7", Revision: "abc123",
		Created: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
	}
}

// files lists an image's files: path -> content (directories map to "/").
func files(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	out := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)) {
			t.Errorf("%s: owner %d:%d, time %s; want root's, the creation time", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		data, _ := io.ReadAll(tr)
		if h.Typeflag == tar.TypeDir {
			out[strings.TrimSuffix(h.Name, "/")] = "/"
		} else {
			out[h.Name] = string(data)
		}
	}
}

// TestIndex builds the two-platform index and reads it back from an OCI
// layout: each platform's image holds its own binary, runs the agent as
// root, is labelled with the version; the digests are the same when
// built again.
func TestIndex(t *testing.T) {
	cfg := testConfig(t)
	idx, err := Index(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "image.oci")
	if err := WriteLayout(dir, idx, "v9.8.7"); err != nil {
		t.Fatal(err)
	}
	// Written again over itself: replaced, not appended.
	if err := WriteLayout(dir, idx, "v9.8.7"); err != nil {
		t.Fatal(err)
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].Annotations[RefNameAnnotation] != "v9.8.7" {
		t.Fatalf("index.json %+v: want the one index, named v9.8.7", tm.Manifests)
	}
	read, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := read.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 2 {
		t.Fatalf("%d manifests, want linux/amd64 and linux/arm64", len(m.Manifests))
	}
	for i, want := range []struct {
		arch    string
		machine elf.Machine
	}{{"amd64", elf.EM_X86_64}, {"arm64", elf.EM_AARCH64}} {
		d := m.Manifests[i]
		if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != want.arch {
			t.Errorf("manifest %d: platform %v, want linux/%s", i, d.Platform, want.arch)
			continue
		}
		img, err := read.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != want.arch || cf.OS != "linux" || cf.Config.User != "0:0" || strings.Join(cf.Config.Entrypoint, " ") != BinaryPath ||
			cf.Config.Labels["org.opencontainers.image.version"] != "v9.8.7" || cf.Config.Labels["org.opencontainers.image.revision"] != "abc123" {
			t.Errorf("%s config: %s/%s user %q entrypoint %q labels %v", want.arch, cf.OS, cf.Architecture, cf.Config.User, cf.Config.Entrypoint, cf.Config.Labels)
		}
		fs := files(t, img)
		f, err := elf.NewFile(strings.NewReader(fs["usr/bin/spanwatch"]))
		if err != nil {
			t.Fatalf("%s: /usr/bin/spanwatch: %v", want.arch, err)
		}
		if f.Machine != want.machine {
			t.Errorf("%s image: /usr/bin/spanwatch is %s", want.arch, f.Machine)
		}
		if fs["etc/ssl/certs/ca-certificates.crt"] == "" || fs["tmp"] != "/" || fs["var/lib/spanwatch"] != "/" {
			t.Errorf("%s image files: %v", want.arch, keys(fs))
		}
	}
	again, err := Index(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := idx.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("built twice: %s, then %s: want reproducible digests", d1, d2)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestIndexRefuses(t *testing.T) {
	cfg := testConfig(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name     string
		binaries map[string]string
		want     string
	}{
		{"arm64 binary as amd64", map[string]string{"linux/amd64": cfg.Binaries["linux/arm64"]}, "ELF machine EM_AARCH64, want EM_X86_64"},
		{"dynamic", map[string]string{"linux/amd64": writeFile(t, dir, "dyn", elfFile(elf.EM_X86_64, true))}, "CGO_ENABLED=0"},
		{"not ELF", map[string]string{"linux/amd64": cfg.CABundle}, "not an ELF file"},
		{"windows", map[string]string{"windows/amd64": cfg.Binaries["linux/amd64"]}, "want linux/ARCH"},
		{"none", nil, "no binaries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			c.Binaries = tc.binaries
			if _, err := Index(c); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Index: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestPush pushes the index to a registry (go-containerregistry's own,
// served on loopback) and reads it back by tag.
func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	ref := u.Host + "/spanwatch/spanwatch:v9.8.7"
	idx, err := Index(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := Push(context.Background(), ref, idx); err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Index(r)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	if d, _ := got.Digest(); d != want {
		t.Errorf("the registry holds %s, pushed %s", d, want)
	}
	m, _ := got.IndexManifest()
	if len(m.Manifests) != 2 {
		t.Errorf("the registry's index has %d manifests", len(m.Manifests))
	}
}
