// Package cgroup names the cgroup a span came from. BPF records a cgroup v2
// id (bpf_get_current_cgroup_id); on cgroup v2 that id is the inode number of
// the cgroup's directory in the cgroup2 mount, so a Resolver walks that mount
// once, keeps an id -> path map, and walks again (rate limited) when it meets
// an id it does not know.
//
// From the path, ParsePath reads what the path names: a container id (docker,
// containerd, CRI-O, podman, with the systemd or the cgroupfs cgroup driver),
// a Kubernetes pod UID, and a systemd unit.
//
// The package needs no privilege beyond reading the cgroup2 mount, which is
// world-readable by default. On a hybrid host (cgroup v1 controllers with the
// v2 hierarchy at /sys/fs/cgroup/unified) FindRoot finds the v2 mount.
package cgroup
