package cgroup

import "testing"

func TestParsePath(t *testing.T) {
	const (
		id  = "3f4b8c2a9d1e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a"
		uid = "0d1c2b3a-4f5e-6d7c-8b9a-a1b2c3d4e5f6"
		us  = "0d1c2b3a_4f5e_6d7c_8b9a_a1b2c3d4e5f6"
	)
	for _, tc := range []struct {
		path string
		want Info
	}{
		{"/", Info{}},
		{"/system.slice/nginx.service", Info{Unit: "nginx.service"}},
		{"/system.slice/nginx.service/worker", Info{Unit: "nginx.service"}},
		{"/user.slice/user-1000.slice/session-3.scope", Info{Unit: "session-3.scope"}},
		{"/user.slice/user-1000.slice/user@1000.service/app.slice/app-foo.scope",
			Info{Unit: "app-foo.scope"}},
		{"/init.scope", Info{Unit: "init.scope"}},
		{"/system.slice", Info{}},
		// docker, systemd and cgroupfs drivers
		{"/system.slice/docker-" + id + ".scope", Info{ContainerID: id}},
		{"/docker/" + id, Info{ContainerID: id}},
		// a unit running inside a container (systemd in the container)
		{"/system.slice/docker-" + id + ".scope/system.slice/nginx.service",
			Info{ContainerID: id, Unit: "nginx.service"}},
		// Kubernetes, systemd driver, containerd and CRI-O
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/cri-containerd-" + id + ".scope",
			Info{ContainerID: id, PodUID: uid}},
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + us + ".slice/crio-" + id + ".scope",
			Info{ContainerID: id, PodUID: uid}},
		{"/kubepods.slice/kubepods-pod" + us + ".slice/crio-" + id + ".scope",
			Info{ContainerID: id, PodUID: uid}},
		// the pod slice itself, and its pause/conmon scopes
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice",
			Info{PodUID: uid}},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/crio-conmon-" + id + ".scope",
			Info{PodUID: uid, Unit: "crio-conmon-" + id + ".scope"}},
		// Kubernetes, cgroupfs driver
		{"/kubepods/burstable/pod" + uid + "/" + id, Info{ContainerID: id, PodUID: uid}},
		{"/kubepods/pod" + uid + "/" + id, Info{ContainerID: id, PodUID: uid}},
		{"/kubepods/besteffort/pod" + uid, Info{PodUID: uid}},
		// containerd's nested systemd form: not containerd.service
		{"/system.slice/containerd.service/kubepods-burstable-pod" + us + ".slice:cri-containerd:" + id,
			Info{ContainerID: id, PodUID: uid}},
		// podman, root and rootless, and its per-container "container" child
		{"/machine.slice/libpod-" + id + ".scope", Info{ContainerID: id}},
		{"/machine.slice/libpod-" + id + ".scope/container", Info{ContainerID: id}},
		{"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + id + ".scope",
			Info{ContainerID: id}},
		{"/libpod_parent/libpod-" + id, Info{ContainerID: id}},
		{"/machine.slice/libpod-conmon-" + id + ".scope", Info{Unit: "libpod-conmon-" + id + ".scope"}},
		// not ids: too short, not hex, no parent that makes a bare name one
		{"/docker/abc", Info{}},
		{"/system.slice/docker-xyz.scope", Info{Unit: "docker-xyz.scope"}},
		{"/" + id, Info{}},
		{"/kubepods/podnotauid", Info{}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			tc.want.Path = tc.path
			if got := ParsePath(tc.path); got != tc.want {
				t.Errorf("ParsePath(%q)\n got  %+v\n want %+v", tc.path, got, tc.want)
			}
		})
	}
}
