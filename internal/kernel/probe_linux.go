//go:build linux

package kernel

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/spanwatch/spanwatch/bpf"
	"github.com/spanwatch/spanwatch/userevents"
)

var (
	probeOnce sync.Once
	probed    *Probes
)

// Probe tests the running kernel for every feature, once per process (the
// results are kept). It raises RLIMIT_MEMLOCK as the collector does:
// before 5.11 the kernel charges BPF memory to it, and a probe that does
// not raise it reads EPERM as a missing feature.
func Probe() *Probes {
	probeOnce.Do(func() { probed = probe() })
	return probed
}

func probe() *Probes {
	p := &Probes{Release: release(), Build: build(), Results: map[Feature]Result{}}
	p.Version, _ = ParseVersion(p.Release)
	memlockErr := rlimit.RemoveMemlock()
	spec, btfErr := btf.LoadKernelSpec()
	for _, f := range Features {
		var err error
		switch f {
		case BTF:
			err = btfErr
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, btf.ErrNotSupported) {
				err = fmt.Errorf("%w: no /sys/kernel/btf/vmlinux", ebpf.ErrNotSupported)
			}
		case RingBuf:
			err = features.HaveMapType(ebpf.RingBuf)
		case MmapArray:
			err = features.HaveMapFlag(features.BPF_F_MMAPABLE)
		case Uprobes:
			if _, e := os.Stat("/sys/bus/event_source/devices/uprobe/type"); e != nil {
				err = fmt.Errorf("%w: no perf uprobe PMU (CONFIG_UPROBE_EVENTS)", ebpf.ErrNotSupported)
			}
		case Atomics:
			err = probeAtomics()
		case Loop:
			err = features.HaveProgramHelper(ebpf.Kprobe, asm.FnLoop)
		case TaskStorage:
			err = features.HaveProgramHelper(ebpf.Kprobe, asm.FnTaskStorageGet)
			if err == nil {
				err = features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetCurrentTaskBtf)
			}
		case AttachCookie:
			err = features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetAttachCookie)
		case SleepableUprobe:
			err = probeSleepable(false)
		case SleepableQueue:
			err = probeSleepable(true)
		case UprobeMulti:
			err = features.HaveBPFLinkUprobeMulti()
		case CopyFromUserStr:
			err = haveKfunc(spec, btfErr, "bpf_copy_from_user_str")
		case CopyFromUserTask:
			err = haveHelperEnum(spec, btfErr, "BPF_FUNC_copy_from_user_task")
		case FentryPerfTp:
			err = probeFentry(btfErr)
		case UserEvents:
			has, known := userevents.KernelHas()
			switch {
			case !known:
				err = errors.New("neither the kernel's config nor /proc/kallsyms could be read")
			case !has:
				err = fmt.Errorf("%w: the kernel is built without CONFIG_USER_EVENTS (6.4+)", ebpf.ErrNotSupported)
			}
		}
		p.Results[f] = resultOf(err, memlockErr)
	}
	return p
}

// resultOf classifies a probe's error: nil is yes, ebpf.ErrNotSupported or
// EINVAL (a load test the kernel refused) is no, anything else unknown.
func resultOf(err, memlockErr error) Result {
	switch {
	case err == nil:
		return Result{Have: true}
	case errors.Is(err, ebpf.ErrNotSupported), errors.Is(err, unix.EINVAL), errors.Is(err, unix.E2BIG):
		return Result{Err: err}
	case errors.Is(err, unix.EPERM) && memlockErr != nil:
		return Result{Unknown: true, Err: fmt.Errorf("%w (and RLIMIT_MEMLOCK could not be raised: %v)", err, memlockErr)}
	case errors.Is(err, unix.EPERM) && os.Geteuid() == 0:
		// Root with the memlock limit raised: the kernel refuses it (a
		// lockdown, or a kernel that refuses tracing programs).
		return Result{Err: fmt.Errorf("the kernel refuses it to root: %w", err)}
	}
	return Result{Unknown: true, Err: err}
}

// build is the kernel's build string (uname -v), which names a
// distribution's package version ("#1 SMP PREEMPT_DYNAMIC Debian
// 6.1.192-3 (2025-...)").
func build() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Version[:])
}

// PreemptRT reports whether the running kernel is built with PREEMPT_RT:
// its uname -v says so (scripts/mkcompile_h writes "PREEMPT_RT" there).
func PreemptRT() bool {
	return strings.Contains(build(), "PREEMPT_RT")
}

func release() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// probeAtomics loads and runs bpf/probes.bpf.c's probe_atomics, whose
// fetch-and-add, compare-and-exchange, exchange and or are BPF_ATOMIC
// instructions beyond the plain add (5.12 in mainline) as clang encodes
// them, and checks what they did.
func probeAtomics() error {
	spec, err := bpf.LoadProbes()
	if err != nil {
		return fmt.Errorf("probe atomics: %w", err)
	}
	var objs bpf.ProbesObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return fmt.Errorf("load a program with BPF atomics: %w", err)
	}
	defer objs.Close()
	if err := objs.ProbeVal.Put(uint32(0), uint64(5)); err != nil {
		return fmt.Errorf("probe atomics: %w", err)
	}
	ret, err := objs.ProbeAtomics.Run(&ebpf.RunOptions{Data: make([]byte, 64), Repeat: 1})
	if err != nil {
		return fmt.Errorf("run a program with BPF atomics: %w", err)
	}
	var v uint64
	if err := objs.ProbeVal.Lookup(uint32(0), &v); err != nil {
		return fmt.Errorf("probe atomics: %w", err)
	}
	if ret != 20 || v != 11 {
		return fmt.Errorf("%w: BPF atomics loaded but returned %d and left %d, want 20 and 11", ebpf.ErrNotSupported, ret, v)
	}
	return nil
}

// probeSleepable loads a sleepable uprobe program (6.0+); with queue, one
// that pops from a queue map, which 6.1 refuses to sleepable programs and
// 6.12 allows.
func probeSleepable(queue bool) error {
	insns := asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
	if queue {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Queue, ValueSize: 4, MaxEntries: 1})
		if err != nil {
			return fmt.Errorf("probe queue maps: %w", err)
		}
		defer m.Close()
		insns = asm.Instructions{
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapPopElem.Call(),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		}
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Kprobe, License: "GPL", Flags: unix.BPF_F_SLEEPABLE, Instructions: insns})
	if err != nil {
		return fmt.Errorf("load a sleepable uprobe program: %w", err)
	}
	return prog.Close()
}

// probeFentry loads a program on fentry of perf_tp_event and attaches it:
// it needs BTF and BPF trampolines, and some kernels refuse tracing
// programs altogether.
func probeFentry(btfErr error) error {
	if btfErr != nil {
		return fmt.Errorf("%w: fentry needs kernel BTF", ebpf.ErrNotSupported)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceFEntry,
		AttachTo: "perf_tp_event", License: "GPL", Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		return fmt.Errorf("load fentry on perf_tp_event: %w", err)
	}
	defer prog.Close()
	l, err := link.AttachTracing(link.TracingOptions{Program: prog})
	if err != nil {
		return fmt.Errorf("attach fentry on perf_tp_event: %w", err)
	}
	return l.Close()
}

// haveKfunc looks for a kfunc in the kernel's BTF.
func haveKfunc(spec *btf.Spec, btfErr error, name string) error {
	if btfErr != nil {
		return fmt.Errorf("%w: kfuncs need kernel BTF", ebpf.ErrNotSupported)
	}
	var fn *btf.Func
	if err := spec.TypeByName(name, &fn); err != nil {
		return fmt.Errorf("%w: no kfunc %s in the kernel's BTF", ebpf.ErrNotSupported, name)
	}
	return nil
}

// haveHelperEnum looks for a helper in the kernel's enum bpf_func_id: the
// helpers the kernel knows, whatever the program types they serve.
func haveHelperEnum(spec *btf.Spec, btfErr error, name string) error {
	if btfErr != nil {
		return fmt.Errorf("kernel BTF: %w", btfErr)
	}
	var e *btf.Enum
	if err := spec.TypeByName("bpf_func_id", &e); err != nil {
		return fmt.Errorf("no enum bpf_func_id in the kernel's BTF: %w", err)
	}
	for _, v := range e.Values {
		if v.Name == name {
			return nil
		}
	}
	return fmt.Errorf("%w: the kernel has no %s", ebpf.ErrNotSupported, name)
}
