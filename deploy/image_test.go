package deploy

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/spanwatch/spanwatch/internal/ociimage"
)

// TestRelease runs deploy/release.sh: static binaries for linux/amd64 and
// linux/arm64, each of its platform's ELF machine and stamped with the
// version, their SHA256SUMS, and the two-platform image as an OCI layout
// whose images hold exactly those binaries. Then it runs the amd64 image
// with runc, as the DaemonSet runs it (the host's PIDs, the three
// capabilities, a read-only root): its demo aggregates spans in the
// kernel and alerts with a symbolized stack.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds spanwatch twice")
	}
	out := t.TempDir()
	const version = "v0.0.0-imagetest"
	log, err := exec.Command("./release.sh", "--version", version, "--out", out).CombinedOutput()
	if err != nil {
		t.Fatalf("deploy/release.sh: %v\n%s", err, log)
	}
	t.Logf("deploy/release.sh:\n%s", log)
	if !regexp.MustCompile(`(?m)^release: spanwatch ` + regexp.QuoteMeta(version) + ` \(revision [0-9a-f]{40}.*linux/amd64\)$`).Match(log) {
		t.Errorf("deploy/release.sh did not run the amd64 binary with the stamped version and revision")
	}
	bins := map[string][]byte{}
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		name := "spanwatch-" + version + "-linux-" + arch
		data, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		bins[arch] = data
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if f.Machine != machine {
			t.Errorf("%s: ELF machine %s, want %s", name, f.Machine, machine)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has an ELF interpreter: not static", name)
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("%s needs shared libraries %v", name, libs)
		}
		// The version is in the binary (what --version prints).
		if !bytes.Contains(data, []byte(version)) {
			t.Errorf("%s does not hold its version", name)
		}
		sum := sha256.Sum256(data)
		if !bytes.Contains(sums, []byte(hex.EncodeToString(sum[:])+"  "+name+"\n")) {
			t.Errorf("SHA256SUMS lacks %s's sum:\n%s", name, sums)
		}
	}

	dir := filepath.Join(out, "spanwatch-"+version+".oci")
	images := readLayout(t, dir, version)
	for arch, img := range images {
		if got := imageFile(t, img, ociimage.BinaryPath); !bytes.Equal(got, bins[arch]) {
			t.Errorf("linux/%s image: %s is not the released binary", arch, ociimage.BinaryPath)
		}
	}

	t.Run("runc", func(t *testing.T) { runImage(t, images["amd64"]) })
}

// readLayout reads an OCI layout holding one index named name, and
// returns its images by architecture: linux/amd64 and linux/arm64, and
// nothing else.
func readLayout(t *testing.T, dir, name string) map[string]v1.Image {
	t.Helper()
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].Annotations[ociimage.RefNameAnnotation] != name {
		t.Fatalf("%s/index.json: %+v, want one index named %s", dir, tm.Manifests, name)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]v1.Image{}
	for _, d := range m.Manifests {
		if d.Platform == nil || d.Platform.OS != "linux" {
			t.Fatalf("manifest %s: platform %v", d.Digest, d.Platform)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		images[d.Platform.Architecture] = img
		t.Logf("%s: %s", d.Platform, d.Digest)
	}
	if len(images) != 2 || images["amd64"] == nil || images["arm64"] == nil {
		t.Fatalf("the index holds %d images, want linux/amd64 and linux/arm64", len(m.Manifests))
	}
	return images
}

// imageFile returns a file of an image's file system.
func imageFile(t *testing.T, img v1.Image, path string) []byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("the image has no %s", path)
		}
		if err != nil {
			t.Fatal(err)
		}
		if "/"+h.Name == path {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return data
		}
	}
}

// unpack writes an image's file system to root. The image is ours (no
// links, no paths leaving root): a tar of directories and files.
func unpack(t *testing.T, img v1.Image, root string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			os.Chmod(p, os.FileMode(h.Mode&0o777)|modeBits(h.Mode))
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data, os.FileMode(h.Mode&0o777)); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("unexpected %q in the image: type %c", h.Name, h.Typeflag)
		}
	}
}

func modeBits(m int64) os.FileMode {
	if m&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}

// runImage runs the image's spanwatch demo under runc (Debian's package)
// from an unpacked bundle, configured as the DaemonSet runs the agent: the
// host's PID namespace, root's uid with only CAP_BPF, CAP_PERFMON and
// CAP_SYS_PTRACE, a read-only root file system, /tmp a tmpfs, the host's
// cgroup tree read-only and its tracefs; no network but loopback. runc
// keeps its state under the test's directory and removes its cgroup when
// the container ends.
func runImage(t *testing.T, img v1.Image) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runc, and the demo loads BPF")
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Skip("runc not installed (Debian package runc; .ci/install-deps.sh installs it)")
	}
	dir := t.TempDir()
	bundle, state := filepath.Join(dir, "bundle"), filepath.Join(dir, "state")
	root := filepath.Join(bundle, "rootfs")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	unpack(t, img, root)
	if out, err := exec.Command(runc, "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v\n%s", err, out)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	caps := make([]string, len(wantCaps))
	copy(caps, wantCaps)
	if err := editSpec(filepath.Join(bundle, "config.json"), func(spec map[string]any) {
		p := spec["process"].(map[string]any)
		p["terminal"] = false
		// The image's entrypoint, with the demo's arguments.
		p["args"] = append(append([]string{}, cf.Config.Entrypoint...), "demo", "--duration", "4s", "--interval", "1s")
		p["env"] = append(append([]string{}, cf.Config.Env...), "SPANWATCH_CGROUP_ROOT=/host/sys/fs/cgroup")
		p["capabilities"] = map[string]any{"bounding": caps, "effective": caps, "permitted": caps}
		spec["root"] = map[string]any{"path": "rootfs", "readonly": true}
		linux := spec["linux"].(map[string]any)
		var ns []any
		for _, n := range linux["namespaces"].([]any) {
			if n.(map[string]any)["type"] != "pid" { // hostPID: true
				ns = append(ns, n)
			}
		}
		linux["namespaces"] = ns
		spec["mounts"] = append(spec["mounts"].([]any),
			map[string]any{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "size=65536k"}},
			map[string]any{"destination": "/sys/kernel/tracing", "type": "bind", "source": "/sys/kernel/tracing", "options": []string{"rbind", "rw"}},
			map[string]any{"destination": "/host/sys/fs/cgroup", "type": "bind", "source": "/sys/fs/cgroup", "options": []string{"rbind", "ro"}},
		)
	}); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("spanwatch-test-%d", os.Getpid())
	t.Cleanup(func() { exec.Command(runc, "--root", state, "delete", "--force", id).Run() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, runc, "--root", state, "run", "--bundle", bundle, id)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("runc run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	// The demo's own account: spans aggregated in the kernel, budgets
	// exceeded, each with the user stack of the thread that ran it,
	// symbolized inside the container.
	done := regexp.MustCompile(`demo done: ([0-9]+) spans aggregated in the kernel, ([0-9]+) over budget, ([0-9]+) with a user stack`).FindStringSubmatch(stdout.String())
	if done == nil || done[1] == "0" || done[2] == "0" || done[3] == "0" {
		t.Errorf("the demo in the image aggregated nothing or captured no stack:\n%s\n%s", stdout.String(), stderr.String())
	}
	for _, want := range []string{"ALERT SpanOverBudget [firing]", "main.demoCheckout"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, stdout.String())
		}
	}
	t.Logf("runc ran the linux/amd64 image's demo: %s", done[0])
}

// editSpec applies edit to an OCI runtime spec file.
func editSpec(path string, edit func(map[string]any)) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		return err
	}
	edit(spec)
	data, err = json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
