package bpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// archObjects are the committed objects of one architecture, read from
// the package directory: a test binary embeds only its own
// architecture's.
func archObjects(t *testing.T, arch string) []string {
	t.Helper()
	objs, err := filepath.Glob("*_" + arch + "_bpfel.o")
	if err != nil || len(objs) == 0 {
		t.Fatalf("no %s objects in bpf/ (go generate ./bpf/...): %v", arch, err)
	}
	return objs
}

// TestObjectsPtRegs checks, in each object's BTF, that struct pt_regs is
// its architecture's layout (vmlinux_min.h): the uprobe and USDT programs
// read the stack pointer, the instruction pointer and the argument
// registers at these offsets, which the kernel's struct pt_regs fixes.
func TestObjectsPtRegs(t *testing.T) {
	want := map[string]map[string]uint32{
		// arch/x86/include/asm/ptrace.h
		"x86": {"bp": 32, "di": 112, "ip": 128, "sp": 152},
		// arch/arm64/include/uapi/asm/ptrace.h: struct user_pt_regs
		"arm64": {"regs": 0, "sp": 248, "pc": 256, "pstate": 264},
	}
	for arch, fields := range want {
		checked := map[string]bool{}
		for _, obj := range archObjects(t, arch) {
			spec, err := btf.LoadSpec(obj)
			if err != nil {
				t.Fatalf("%s: %v", obj, err)
			}
			name := "pt_regs"
			if arch == "arm64" {
				name = "user_pt_regs" // what bpf_tracing.h's PT_REGS_* cast to
			}
			var s *btf.Struct
			if err := spec.TypeByName(name, &s); errors.Is(err, btf.ErrNotFound) {
				continue // the object reads no registers
			} else if err != nil {
				t.Fatalf("%s: struct %s: %v", obj, name, err)
			}
			checked[strings.SplitN(obj, "_", 2)[0]] = true
			got := map[string]uint32{}
			for _, m := range s.Members {
				got[m.Name] = m.Offset.Bytes()
			}
			for f, off := range fields {
				if o, ok := got[f]; !ok || o != off {
					t.Errorf("%s: struct %s.%s at %d (present %v), want %d", obj, name, f, o, ok, off)
				}
			}
		}
		for _, obj := range []string{"spanwatch", "usdt", "funcs"} {
			if !checked[obj] {
				t.Errorf("%s_%s_bpfel.o: no struct pt_regs in its BTF to check", obj, arch)
			}
		}
	}
}

// TestARM64ObjectsRelocate relocates the arm64 objects' CO-RE accesses
// against the BTF of the Debian arm64 kernels that test/vm caches
// ($SPANWATCH_VM_CACHE, /var/cache/spanwatch-vm), extracted from their
// Image: every field the programs read exists there (thread.uw.tp_value
// for the in-flight samplers among them), except task_struct's state,
// "state" before 5.14 and "__state" from 5.14, which the programs read
// through whichever exists (bpf_core_field_exists). It skips
// when no arm64 kernel is cached (test/vm/distro-kernel.sh 6.12-arm64
// fetches one).
func TestARM64ObjectsRelocate(t *testing.T) {
	cache := os.Getenv("SPANWATCH_VM_CACHE")
	if cache == "" {
		cache = "/var/cache/spanwatch-vm"
	}
	images, _ := filepath.Glob(filepath.Join(cache, "debian-linux-image-*-arm64-*", "vmlinuz"))
	if len(images) == 0 {
		t.Skipf("no arm64 kernel in %s: run test/vm/distro-kernel.sh 6.12-arm64 to fetch one", cache)
	}
	for _, img := range images {
		t.Run(filepath.Base(filepath.Dir(img)), func(t *testing.T) {
			raw, err := os.ReadFile(img)
			if err != nil {
				t.Fatal(err)
			}
			kernel, err := imageBTF(raw)
			if err != nil {
				t.Skipf("%s: %v", img, err)
			}
			var regs *btf.Struct
			if err := kernel.TypeByName("user_pt_regs", &regs); err != nil || regs.Size != 272 {
				t.Errorf("the kernel's struct user_pt_regs: %v %v, want 272 bytes", regs, err)
			}
			for _, obj := range archObjects(t, "arm64") {
				spec, err := ebpf.LoadCollectionSpec(obj)
				if err != nil {
					t.Fatalf("%s: %v", obj, err)
				}
				for name, p := range spec.Programs {
					var relos []*btf.CORERelocation
					for i := range p.Instructions {
						if r := btf.CORERelocationMetadata(&p.Instructions[i]); r != nil {
							relos = append(relos, r)
						}
					}
					if len(relos) == 0 {
						continue
					}
					fixups, err := btf.CORERelocate(relos, []*btf.Spec{kernel}, binary.LittleEndian,
						func(btf.Type) (btf.TypeID, error) { return 0, nil })
					if err != nil {
						t.Errorf("%s/%s: %v", obj, name, err)
						continue
					}
					for i, f := range fixups {
						if strings.Contains(f.String(), "poison") && !stateVariant(relos[i].String()) {
							t.Errorf("%s/%s: %v does not relocate: %v", obj, name, relos[i], f.String())
						}
					}
				}
			}
		})
	}
}

// stateVariant reports whether a relocation reads one of the two
// spellings of task_struct's state (inflight.bpf.c's task_state): one of
// them is absent on every kernel.
func stateVariant(relo string) bool {
	return strings.Contains(relo, "task_struct___old") || strings.Contains(relo, "task_struct___new")
}

// imageBTF finds the kernel's BTF in an uncompressed arm64 Image (what
// Debian's arm64 vmlinuz is): the raw blob /sys/kernel/btf/vmlinux
// shows, at its magic, with types right after the header and strings
// right after the types.
func imageBTF(img []byte) (*btf.Spec, error) {
	magic := []byte{0x9f, 0xeb, 1, 0, 24, 0, 0, 0} // magic, version 1, flags, header length 24
	for off := 0; ; off++ {
		i := bytes.Index(img[off:], magic)
		if i < 0 {
			return nil, errors.New("no BTF in the image (compressed, or built without CONFIG_DEBUG_INFO_BTF)")
		}
		off += i
		if off+24 > len(img) {
			return nil, errors.New("no BTF in the image")
		}
		h := img[off+8 : off+24]
		typeOff, typeLen := binary.LittleEndian.Uint32(h[0:]), binary.LittleEndian.Uint32(h[4:])
		strOff, strLen := binary.LittleEndian.Uint32(h[8:]), binary.LittleEndian.Uint32(h[12:])
		end := uint64(off) + 24 + uint64(strOff) + uint64(strLen)
		if typeOff != 0 || strOff != typeLen || typeLen < 1<<20 || end > uint64(len(img)) {
			continue
		}
		return btf.LoadSpecFromReader(bytes.NewReader(img[off:end]))
	}
}
