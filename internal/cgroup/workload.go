package cgroup

import "path/filepath"

// A Workload is what a cgroup belongs to as the operator sees it, for the
// series quota: a Kubernetes pod, a container, a systemd unit, or a cgroup
// root made and handed to no one. A user who may create cgroups (cgroup v2
// delegation: a directory chowned to him, or systemd's Delegate=) creates
// them inside his workload, never a new one, so the quota he shares with
// everything else of his workload is one.
//
// The workload of a cgroup is, walking its path from the root:
//
//  1. the first cgroup that is a pod, a container, or not root's (owned
//     by another user, or writable by group or others): the names below
//     it are the choice of whoever may write it, so none of them counts
//     (a user's "kubepods-pod<uid>.slice" is not a pod);
//  2. failing that, the innermost systemd unit (.service or .scope: all
//     root's);
//  3. failing that, the cgroup itself (root made it).
type Workload struct {
	// ID is the cgroup id of the workload's root cgroup.
	ID uint64
	// Delegated is set for a cgroup strictly below the first cgroup that
	// is not root's: one a user other than root may have made. There may
	// be as many of those as users care to make.
	Delegated bool
}

// workloadWalk computes workloads during a walk that visits every parent
// before its children (filepath.WalkDir does).
type workloadWalk struct {
	byPath map[string]workloadState
	out    map[uint64]Workload
}

type workloadState struct {
	info    Info
	first   uint64 // rule 1's cgroup, 0 if none yet
	unit    uint64 // rule 2's, 0 if none yet
	notRoot bool   // the cgroup is not root's alone
	below   bool   // an ancestor is not root's alone
}

func newWorkloadWalk(n int) *workloadWalk {
	return &workloadWalk{byPath: make(map[string]workloadState, n), out: make(map[uint64]Workload, n)}
}

// add records the cgroup at path p (absolute, under the mount) with id,
// what its path says, and whether it is root's alone. The mount itself
// comes first, with no parent.
func (w *workloadWalk) add(p string, id uint64, info Info, rootOnly bool) {
	parent, hasParent := w.byPath[filepath.Dir(p)]
	if !hasParent {
		parent = workloadState{}
	}
	st := workloadState{info: info, notRoot: !rootOnly, below: parent.below || parent.notRoot}
	switch {
	case parent.first != 0:
		st.first = parent.first
	case !rootOnly || info.PodUID != parent.info.PodUID || info.ContainerID != parent.info.ContainerID:
		st.first = id
	default:
		st.unit = parent.unit
		if info.Unit != "" && info.Unit != parent.info.Unit {
			st.unit = id
		}
	}
	out := Workload{ID: id, Delegated: st.below}
	if st.first != 0 {
		out.ID = st.first
	} else if st.unit != 0 {
		out.ID = st.unit
	}
	w.byPath[p] = st
	w.out[id] = out
}
