package cgroup

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

const (
	testCtr  = "3f4b8c2a9d1e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a"
	testCtr2 = "aaaabbbbccccddddeeeeffff0000111122223333444455556666777788889999"
	testCtr3 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	testUID  = "0d1c2b3a-4f5e-6d7c-8b9a-a1b2c3d4e5f6"
	testUID2 = "11111111-2222-3333-4444-555555555555"
)

func TestParsePodLogDir(t *testing.T) {
	for _, tc := range []struct {
		name         string
		ns, pod, uid string
		ok           bool
	}{
		{"shop_checkout-7d9f8b6c5-x2x9z_" + testUID, "shop", "checkout-7d9f8b6c5-x2x9z", testUID, true},
		{"kube-system_coredns-5d78c9869d-abcde_" + testUID, "kube-system", "coredns-5d78c9869d-abcde", testUID, true},
		{"shop_checkout_notauid", "", "", "", false},
		{"shop_" + testUID, "", "", "", false},
		{"_checkout_" + testUID, "", "", "", false},
		{"a_b_c_" + testUID, "", "", "", false},
	} {
		ns, pod, uid, ok := ParsePodLogDir(tc.name)
		if ns != tc.ns || pod != tc.pod || uid != tc.uid || ok != tc.ok {
			t.Errorf("ParsePodLogDir(%q) = %q, %q, %q, %v; want %q, %q, %q, %v", tc.name, ns, pod, uid, ok, tc.ns, tc.pod, tc.uid, tc.ok)
		}
	}
}

func TestParseContainerLogName(t *testing.T) {
	for _, tc := range []struct {
		name  string
		id    string
		names K8sNames
		ok    bool
	}{
		{"checkout-7d9f8b6c5-x2x9z_shop_server-" + testCtr + ".log", testCtr, K8sNames{Namespace: "shop", Pod: "checkout-7d9f8b6c5-x2x9z", Container: "server"}, true},
		// container names may hold dashes; the id is after the last one
		{"web_default_istio-proxy-" + testCtr + ".log", testCtr, K8sNames{Namespace: "default", Pod: "web", Container: "istio-proxy"}, true},
		{"web_default_server-" + testCtr, "", K8sNames{}, false},            // no .log
		{"web_default_server-nothex.log", "", K8sNames{}, false},            // no id
		{"web_server-" + testCtr + ".log", "", K8sNames{}, false},           // no namespace
		{"web_default_-" + testCtr + ".log", "", K8sNames{}, false},         // no container name
		{"web_default_x_server-" + testCtr + ".log", "", K8sNames{}, false}, // too many fields
	} {
		id, names, ok := ParseContainerLogName(tc.name)
		if id != tc.id || names != tc.names || ok != tc.ok {
			t.Errorf("ParseContainerLogName(%q) = %q, %+v, %v; want %q, %+v, %v", tc.name, id, names, ok, tc.id, tc.names, tc.ok)
		}
	}
}

// nodeDirs lays out what a kubelet and its runtimes keep on a node, in a
// temporary directory: the pod log directories, the container log
// symlinks, and containerd's and CRI-O's OCI configs.
type nodeDirs struct {
	t                 *testing.T
	pods, ctrs        string
	containerd, crio  string
	containerdPattern string
	crioPattern       string
}

func newNodeDirs(t *testing.T) *nodeDirs {
	root := t.TempDir()
	n := &nodeDirs{t: t,
		pods:       filepath.Join(root, "var/log/pods"),
		ctrs:       filepath.Join(root, "var/log/containers"),
		containerd: filepath.Join(root, "run/containerd/io.containerd.runtime.v2.task/k8s.io"),
		crio:       filepath.Join(root, "run/containers/storage/overlay-containers"),
	}
	n.containerdPattern = filepath.Join(n.containerd, "%s", "config.json")
	n.crioPattern = filepath.Join(n.crio, "%s", "userdata", "config.json")
	for _, d := range []string{n.pods, n.ctrs, n.containerd, n.crio} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func (n *nodeDirs) names(minRefresh time.Duration) *Names {
	return NewNames(NamesConfig{PodLogDir: n.pods, ContainerLogDir: n.ctrs, CRIConfigs: []string{n.containerdPattern, n.crioPattern}, MinRefresh: minRefresh})
}

// pod makes the kubelet's log directory of a pod with the given container
// directories, and returns it.
func (n *nodeDirs) pod(ns, pod, uid string, containers ...string) string {
	dir := filepath.Join(n.pods, ns+"_"+pod+"_"+uid)
	for _, c := range append([]string{""}, containers...) {
		if err := os.MkdirAll(filepath.Join(dir, c), 0o755); err != nil {
			n.t.Fatal(err)
		}
		if c != "" {
			if err := os.WriteFile(filepath.Join(dir, c, "0.log"), nil, 0o644); err != nil {
				n.t.Fatal(err)
			}
		}
	}
	return dir
}

// link makes the kubelet's container log symlink.
func (n *nodeDirs) link(ns, pod, uid, container, id string) {
	target := filepath.Join(n.pods, ns+"_"+pod+"_"+uid, container, "0.log")
	if err := os.Symlink(target, filepath.Join(n.ctrs, fmt.Sprintf("%s_%s_%s-%s.log", pod, ns, container, id))); err != nil {
		n.t.Fatal(err)
	}
}

// ociConfig writes an OCI config with the given annotations where the
// runtime keeps it.
func (n *nodeDirs) ociConfig(pattern, id string, annotations map[string]string) {
	p := fmt.Sprintf(pattern, id)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		n.t.Fatal(err)
	}
	b, err := json.Marshal(map[string]any{"ociVersion": "1.1.0", "process": map[string]any{"args": []string{"/server"}}, "annotations": annotations})
	if err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// TestNamesLookup checks every source of names, their precedence, and the
// cases where the node cannot tell a container's name.
func TestNamesLookup(t *testing.T) {
	n := newNodeDirs(t)
	// A pod with one container, known only by its pod log directory.
	n.pod("shop", "checkout-1", testUID, "server")
	// A pod with two containers, each with its kubelet symlink.
	n.pod("shop", "search-1", testUID2, "server", "sidecar")
	n.link("shop", "search-1", testUID2, "sidecar", testCtr2)
	// A container known only to containerd (no logs, e.g. a mirror node).
	n.ociConfig(n.containerdPattern, testCtr3, map[string]string{
		"io.kubernetes.cri.container-type":    "container",
		"io.kubernetes.cri.container-name":    "worker",
		"io.kubernetes.cri.sandbox-name":      "batch-7",
		"io.kubernetes.cri.sandbox-namespace": "jobs",
		"io.kubernetes.cri.sandbox-uid":       "99999999-8888-7777-6666-555555555555",
	})
	const crioCtr = "ccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccdddd"
	n.ociConfig(n.crioPattern, crioCtr, map[string]string{
		"io.kubernetes.container.name": "api",
		"io.kubernetes.pod.name":       "gateway-0",
		"io.kubernetes.pod.namespace":  "edge",
	})
	const otherCtr = "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeffff"

	names := n.names(time.Nanosecond)
	for _, tc := range []struct {
		name string
		ctr  string
		uid  string
		want K8sNames
	}{
		{"pod dir, one container", testCtr, testUID, K8sNames{Namespace: "shop", Pod: "checkout-1", Container: "server"}},
		{"pod only", "", testUID, K8sNames{Namespace: "shop", Pod: "checkout-1"}},
		{"symlink", testCtr2, testUID2, K8sNames{Namespace: "shop", Pod: "search-1", Container: "sidecar"}},
		// Two containers and no symlink for this id: the pod is known,
		// the container cannot be told.
		{"pod dir, two containers", otherCtr, testUID2, K8sNames{Namespace: "shop", Pod: "search-1"}},
		{"containerd config", testCtr3, "", K8sNames{Namespace: "jobs", Pod: "batch-7", Container: "worker"}},
		{"cri-o config", crioCtr, "", K8sNames{Namespace: "edge", Pod: "gateway-0", Container: "api"}},
		{"unknown", otherCtr, "", K8sNames{}},
		{"nothing asked", "", "", K8sNames{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := names.Lookup(tc.ctr, tc.uid); got != tc.want {
				t.Errorf("Lookup(%q, %q) = %+v, want %+v", tc.ctr, tc.uid, got, tc.want)
			}
		})
	}
	if _, err := names.Scans(); err != nil {
		t.Errorf("scan error %v", err)
	}
}

// TestNamesRefresh checks that unknown ids cause at most one scan per
// MinRefresh, that new pods are found after it, and that removed pods go.
func TestNamesRefresh(t *testing.T) {
	n := newNodeDirs(t)
	names := n.names(time.Minute)
	now := time.Now()
	names.now = func() time.Time { return now }

	if got := names.Lookup(testCtr, testUID); got != (K8sNames{}) {
		t.Fatalf("Lookup on an empty node = %+v", got)
	}
	dir := n.pod("shop", "checkout-1", testUID, "server")
	for range 100 {
		if got := names.Lookup(testCtr, testUID); got != (K8sNames{}) {
			t.Fatalf("Lookup within MinRefresh of the last scan = %+v, want nothing yet", got)
		}
	}
	if s, _ := names.Scans(); s != 1 {
		t.Fatalf("scans after 101 misses within MinRefresh = %d, want 1", s)
	}
	now = now.Add(time.Minute)
	want := K8sNames{Namespace: "shop", Pod: "checkout-1", Container: "server"}
	if got := names.Lookup(testCtr, testUID); got != want {
		t.Fatalf("Lookup after MinRefresh = %+v, want %+v", got, want)
	}
	// A pod the kubelet removed drops out at the next scan.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if got := names.Lookup("", testUID2); got != (K8sNames{}) {
		t.Fatalf("Lookup(unknown pod) = %+v", got)
	}
	if got := names.Lookup("", testUID); got != (K8sNames{}) {
		t.Fatalf("Lookup(removed pod) = %+v, want nothing", got)
	}
}

// TestNamesOff checks that "-" turns each source off.
func TestNamesOff(t *testing.T) {
	n := newNodeDirs(t)
	n.pod("shop", "checkout-1", testUID, "server")
	n.link("shop", "checkout-1", testUID, "server", testCtr)
	n.ociConfig(n.containerdPattern, testCtr2, map[string]string{"io.kubernetes.cri.container-name": "w", "io.kubernetes.cri.sandbox-name": "p", "io.kubernetes.cri.sandbox-namespace": "ns"})
	names := NewNames(NamesConfig{PodLogDir: "-", ContainerLogDir: "-", CRIConfigs: []string{"-"}})
	for _, q := range [][2]string{{testCtr, testUID}, {"", testUID}, {testCtr2, ""}} {
		if got := names.Lookup(q[0], q[1]); got != (K8sNames{}) {
			t.Errorf("Lookup(%q, %q) with every source off = %+v", q[0], q[1], got)
		}
	}
}
