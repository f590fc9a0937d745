// Package cgroup names the cgroup a span came from. BPF records a cgroup v2
// id (bpf_get_current_cgroup_id); on cgroup v2 that id is the inode number of
// the cgroup's directory in the cgroup2 mount, so a Resolver walks that mount
// once, keeps an id -> path map, and walks again (rate limited) when it meets
// an id it does not know.
//
// From the path, ParsePath reads what the path names: a container id (docker,
// containerd, CRI-O, podman, with the systemd or the cgroupfs cgroup driver),
// a Kubernetes pod UID, and a systemd unit. Names turns the ids into the
// names people know, from what the node keeps on disk, without the API
// server: the kubelet's log directories (/var/log/pods, /var/log/containers)
// and the CRI runtime's container configs. ProcessName names the executable
// the cgroup's processes run, when they all run one.
//
// The package needs no privilege beyond reading the cgroup2 mount, which is
// world-readable by default, and the kubelet's log directories (root's);
// reading other users' /proc/PID/exe needs CAP_SYS_PTRACE (without it the
// command name stands in). Workloads tells, for the series quota, the
// workload each cgroup belongs to as the operator sees it (a pod, a
// container, a systemd unit, a cgroup delegated to a user with all he made
// below it), from the paths and the owners of the directories. On a hybrid host (cgroup v1 controllers with the
// v2 hierarchy at /sys/fs/cgroup/unified) FindRoot finds the v2 mount.
package cgroup
