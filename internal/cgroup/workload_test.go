package cgroup

import "testing"

// TestWorkloadRules walks made-up trees through the rules of Workload:
// names below a cgroup that is not root's count for nothing, a pod or a
// container ends the walk, units nest.
func TestWorkloadRules(t *testing.T) {
	const uid = "0123abcd-0123-4567-89ab-0123456789ab"
	const uidU = "0123abcd_0123_4567_89ab_0123456789ab"
	const cid = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	type dir struct {
		path     string
		rootOnly bool
		want     string // the path of its workload's root
		deleg    bool
	}
	tree := []dir{
		{"", true, "", false},
		{"/system.slice", true, "/system.slice", false},
		{"/system.slice/nginx.service", true, "/system.slice/nginx.service", false},
		{"/system.slice/nginx.service/worker", true, "/system.slice/nginx.service", false},
		{"/system.slice/docker-" + cid + ".scope", true, "/system.slice/docker-" + cid + ".scope", false},
		{"/system.slice/docker-" + cid + ".scope/init.scope", true, "/system.slice/docker-" + cid + ".scope", false},
		{"/kubepods.slice", true, "/kubepods.slice", false},
		{"/kubepods.slice/kubepods-pod" + uidU + ".slice", true, "/kubepods.slice/kubepods-pod" + uidU + ".slice", false},
		{"/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope", true, "/kubepods.slice/kubepods-pod" + uidU + ".slice", false},
		// containerd's nested form: the pod, not containerd.service.
		{"/system.slice/containerd.service", true, "/system.slice/containerd.service", false},
		{"/system.slice/containerd.service/kubepods-pod" + uidU + ".slice:cri-containerd:" + cid, true, "/system.slice/containerd.service/kubepods-pod" + uidU + ".slice:cri-containerd:" + cid, false},
		// A user's systemd: his user@.service is his, and so is
		// everything he makes below it, whatever its name.
		{"/user.slice", true, "/user.slice", false},
		{"/user.slice/user-1000.slice", true, "/user.slice/user-1000.slice", false},
		{"/user.slice/user-1000.slice/session-3.scope", true, "/user.slice/user-1000.slice/session-3.scope", false},
		{"/user.slice/user-1000.slice/user@1000.service", false, "/user.slice/user-1000.slice/user@1000.service", false},
		{"/user.slice/user-1000.slice/user@1000.service/app.slice", false, "/user.slice/user-1000.slice/user@1000.service", true},
		{"/user.slice/user-1000.slice/user@1000.service/app.slice/x.service", false, "/user.slice/user-1000.slice/user@1000.service", true},
		{"/user.slice/user-1000.slice/user@1000.service/kubepods-pod" + uidU + ".slice", false, "/user.slice/user-1000.slice/user@1000.service", true},
		{"/user.slice/user-1000.slice/user@1000.service/docker-" + cid + ".scope", false, "/user.slice/user-1000.slice/user@1000.service", true},
		// A plain cgroup delegated by hand, and one writable by a group.
		{"/lab", true, "/lab", false},
		{"/lab/team", false, "/lab/team", false},
		{"/lab/team/a", false, "/lab/team", true},
		{"/lab/team/a/b", false, "/lab/team", true},
		{"/lab/shared", false, "/lab/shared", false},
		{"/lab/mine", true, "/lab/mine", false},
	}
	const mount = "/sys/fs/cgroup"
	w := newWorkloadWalk(len(tree))
	ids := map[string]uint64{}
	for i, d := range tree {
		ids[d.path] = uint64(i + 1)
		w.add(mount+d.path, uint64(i+1), ParsePath("/"+d.path[min(1, len(d.path)):]), d.rootOnly)
	}
	for i, d := range tree {
		got := w.out[uint64(i+1)]
		if got.ID != ids[d.want] || got.Delegated != d.deleg {
			t.Errorf("%q: workload %d delegated %v, want %d (%q) delegated %v", d.path, got.ID, got.Delegated, ids[d.want], d.want, d.deleg)
		}
	}
}
