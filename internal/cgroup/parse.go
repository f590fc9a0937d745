package cgroup

import "strings"

// Info is what is known about a cgroup and the processes in it.
type Info struct {
	// Path is the cgroup's path relative to the cgroup2 mount, starting
	// with "/" (the form /proc/PID/cgroup shows); empty when unknown.
	Path string `json:"path,omitempty"`
	// ContainerID is the container id (usually 64 hex digits) when the
	// path is a container's cgroup or lies below one.
	ContainerID string `json:"container_id,omitempty"`
	// PodUID is the Kubernetes pod UID, with dashes, when the path lies in
	// a pod's cgroup.
	PodUID string `json:"pod_uid,omitempty"`
	// Unit is the innermost systemd unit (a .service, or a .scope that is
	// not a container's) below any container or pod in the path, so a
	// container's processes are not attributed to the runtime's service.
	Unit string `json:"unit,omitempty"`

	// Namespace, Pod and Container are the Kubernetes names of the pod
	// and container, where the node tells them (see Names); ParsePath
	// leaves them empty.
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Container string `json:"container,omitempty"`
	// Process is the executable name of the cgroup's processes when they
	// all run one executable (see ProcessName); ParsePath leaves it empty.
	Process string `json:"process,omitempty"`
	// Service is the OpenTelemetry service name the cgroup's processes
	// declare (see ProcessName); ParsePath leaves it empty.
	Service string `json:"service,omitempty"`
	// Several says the cgroup's processes run more than one executable
	// (see Processes): Process is then empty, and the collector keeps
	// the cgroup's series per process.
	Several bool `json:"several,omitempty"`
}

// containerScopePrefixes are the prefixes container runtimes give the
// systemd scope (or, with the cgroupfs driver, the directory) of a
// container. Conmon scopes ("crio-conmon-", "libpod-conmon-") hold the
// monitor, not the container, and are deliberately absent.
var containerScopePrefixes = []string{
	"docker-",
	"cri-containerd-",
	"crio-",
	"libpod-",
}

// ParsePath reads the container id, pod UID and systemd unit out of a
// cgroup v2 path. It recognizes
//
//	/system.slice/docker-<id>.scope                            docker, systemd driver
//	/docker/<id>                                               docker, cgroupfs driver
//	/kubepods.slice/kubepods-burstable.slice/
//	    kubepods-burstable-pod<uid_with_underscores>.slice/
//	    cri-containerd-<id>.scope | crio-<id>.scope            Kubernetes, systemd driver
//	/kubepods/burstable/pod<uid>/<id>                          Kubernetes, cgroupfs driver
//	/system.slice/containerd.service/
//	    kubepods-...-pod<uid>.slice:cri-containerd:<id>        containerd's nested form
//	.../libpod-<id>.scope                                      podman
//	/system.slice/nginx.service, /user.slice/.../session-3.scope  systemd units
//
// Anything it does not recognize is left empty; Path is always set.
func ParsePath(path string) Info {
	info := Info{Path: path}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	// A unit counts only below the innermost container or pod, so a
	// container's processes are not attributed to the runtime's service.
	bare := false // the parent makes a bare hex name a container id
	for _, p := range parts {
		pod, id := podUID(p), containerID(p, bare)
		// containerd's nested form names both in one component:
		// "kubepods-burstable-pod<uid>.slice:cri-containerd:<id>".
		if f := strings.Split(p, ":"); len(f) == 3 {
			pod, id = podUID(f[0]), ""
			if isHexID(f[2]) {
				id = f[2]
			}
		}
		if pod != "" {
			info.PodUID = pod
		}
		if id != "" {
			info.ContainerID = id
		}
		if pod != "" || id != "" {
			info.Unit = ""
		} else if strings.HasSuffix(p, ".service") || strings.HasSuffix(p, ".scope") {
			info.Unit = p
		}
		bare = p == "docker" || pod != ""
	}
	return info
}

// containerID returns the container id a single path component names, or
// "". bare reports whether the parent component makes a bare hex name a
// container id (cgroupfs driver: /docker/<id>, /kubepods/.../pod<uid>/<id>).
func containerID(p string, bare bool) string {
	if rest, ok := strings.CutSuffix(p, ".scope"); ok {
		for _, pre := range containerScopePrefixes {
			if id, ok := strings.CutPrefix(rest, pre); ok && isHexID(id) {
				return id
			}
		}
		return ""
	}
	// podman with the cgroupfs driver: /libpod_parent/libpod-<id>.
	if id, ok := strings.CutPrefix(p, "libpod-"); ok && isHexID(id) {
		return id
	}
	if bare && isHexID(p) {
		return p
	}
	return ""
}

// podUID returns the Kubernetes pod UID a path component names, or "".
func podUID(p string) string {
	if rest, ok := strings.CutSuffix(p, ".slice"); ok {
		// kubepods-pod<uid>.slice, kubepods-burstable-pod<uid>.slice,
		// kubepods-besteffort-pod<uid>.slice; the UID's dashes are
		// underscores because "-" separates slice levels.
		if !strings.HasPrefix(rest, "kubepods-") {
			return ""
		}
		i := strings.LastIndex(rest, "-pod")
		if i < 0 {
			return ""
		}
		uid := strings.ReplaceAll(rest[i+len("-pod"):], "_", "-")
		if isUID(uid) {
			return uid
		}
		return ""
	}
	// cgroupfs driver: /kubepods/pod<uid>, /kubepods/burstable/pod<uid>.
	if uid, ok := strings.CutPrefix(p, "pod"); ok && isUID(uid) {
		return uid
	}
	return ""
}

// isHexID reports whether s looks like a container id: at least 12 hex
// digits (runtimes use 64; short ids appear in some test setups).
func isHexID(s string) bool {
	if len(s) < 12 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// isUID reports whether s is an RFC 4122 UUID in its 8-4-4-4-12 form, as
// Kubernetes writes pod UIDs.
func isUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
}
