package cgroup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spanwatch/spanwatch/internal/userfile"
)

// Default places the kubelet and the container runtimes keep what names a
// container, on the node itself. None of them needs the API server.
const (
	// DefaultPodLogDir is the kubelet's pod log directory:
	// <namespace>_<pod>_<uid>/<container>/<restart>.log.
	DefaultPodLogDir = "/var/log/pods"
	// DefaultContainerLogDir holds the kubelet's per-container symlinks:
	// <pod>_<namespace>_<container>-<container id>.log.
	DefaultContainerLogDir = "/var/log/containers"
)

// DefaultCRIConfigs are the OCI runtime configs (config.json) that
// containerd's and CRI-O's CRI plugins write for each container, with %s
// standing for the container id. Both carry the pod's namespace, name and
// UID and the container's name as annotations.
var DefaultCRIConfigs = []string{
	"/run/containerd/io.containerd.runtime.v2.task/k8s.io/%s/config.json",
	"/run/containers/storage/overlay-containers/%s/userdata/config.json",
}

// NamesConfig says where a Names looks. An empty field means its default;
// "-" (or, for CRIConfigs, a list holding only "-") turns that source off.
type NamesConfig struct {
	PodLogDir       string
	ContainerLogDir string
	CRIConfigs      []string
	// MinRefresh is the least time between two scans of the log
	// directories, and between two reads of one container's CRI config,
	// caused by ids they did not know; 0 means DefaultMinRefresh.
	MinRefresh time.Duration
}

// Names finds the Kubernetes names (namespace, pod, container) of container
// ids and pod UIDs from what the node keeps on disk, in this order:
//
//  1. the kubelet's container log symlinks (DefaultContainerLogDir), which
//     name the pod, namespace and container of every container id;
//  2. the CRI runtime's OCI config of the container (DefaultCRIConfigs),
//     whose annotations name the same;
//  3. the kubelet's pod log directories (DefaultPodLogDir), which name the
//     namespace and pod of a pod UID, and the container when the pod has
//     only one container directory (one container, no init containers).
//
// An agent in a pod sees these paths when they are mounted from the host
// at the same places (deploy/kubernetes does so, read-only). Names is safe
// for concurrent use.
type Names struct {
	cfg NamesConfig
	now func() time.Time

	mu        sync.Mutex
	byCtr     map[string]K8sNames // container id -> names
	byPod     map[string]podDir   // pod UID -> namespace, name, directory
	criMiss   map[string]time.Time
	lastScan  time.Time
	scans     int
	scanError error
}

// K8sNames are what Kubernetes calls a container: empty fields are unknown.
type K8sNames struct {
	Namespace string
	Pod       string
	Container string
}

type podDir struct {
	namespace, name, dir string
}

// NewNames returns a Names over cfg's directories. It reads nothing until
// asked.
func NewNames(cfg NamesConfig) *Names {
	if cfg.PodLogDir == "" {
		cfg.PodLogDir = DefaultPodLogDir
	}
	if cfg.ContainerLogDir == "" {
		cfg.ContainerLogDir = DefaultContainerLogDir
	}
	if cfg.CRIConfigs == nil {
		cfg.CRIConfigs = DefaultCRIConfigs
	}
	if len(cfg.CRIConfigs) == 1 && cfg.CRIConfigs[0] == "-" {
		cfg.CRIConfigs = []string{}
	}
	if cfg.MinRefresh <= 0 {
		cfg.MinRefresh = DefaultMinRefresh
	}
	return &Names{
		cfg:     cfg,
		now:     time.Now,
		byCtr:   map[string]K8sNames{},
		byPod:   map[string]podDir{},
		criMiss: map[string]time.Time{},
	}
}

// Lookup returns the names of a container id and the pod UID it runs in
// (either may be empty). It scans the log directories again, at most once
// per MinRefresh, when it does not know the container or the pod.
func (n *Names) Lookup(containerID, podUID string) K8sNames {
	if containerID == "" && podUID == "" {
		return K8sNames{}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if got, ok := n.lookupLocked(containerID, podUID); ok {
		return got
	}
	now := n.now()
	if now.Sub(n.lastScan) >= n.cfg.MinRefresh {
		n.scanLocked(now)
		if got, ok := n.lookupLocked(containerID, podUID); ok {
			return got
		}
	}
	if containerID != "" {
		if got, ok := n.criLocked(containerID, now); ok {
			n.byCtr[containerID] = got
			return got
		}
	}
	got, _ := n.lookupLocked(containerID, podUID)
	return got
}

// Scans returns how many times the log directories were scanned, and the
// last scan's error (a missing directory is not one).
func (n *Names) Scans() (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.scans, n.scanError
}

// lookupLocked answers from what is known; ok means the answer is complete
// (a container id's names, or a pod's when there is no container id).
func (n *Names) lookupLocked(containerID, podUID string) (K8sNames, bool) {
	if containerID != "" {
		if got, ok := n.byCtr[containerID]; ok {
			return got, true
		}
	}
	p, ok := n.byPod[podUID]
	if podUID == "" || !ok {
		return K8sNames{}, false
	}
	got := K8sNames{Namespace: p.namespace, Pod: p.name}
	if containerID == "" {
		return got, true
	}
	got.Container = onlyContainer(p.dir)
	return got, false
}

// onlyContainer returns the name of the one container directory in a pod's
// log directory, or "" when there are none or several (the container id
// cannot be matched to a directory then).
func onlyContainer(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	name := ""
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if name != "" {
			return ""
		}
		name = e.Name()
	}
	return name
}

func (n *Names) scanLocked(now time.Time) {
	n.lastScan = now
	n.scans++
	var errs []error
	if d := n.cfg.ContainerLogDir; d != "-" {
		ents, err := os.ReadDir(d)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("read container log directory: %w", err))
		}
		for _, e := range ents {
			if id, names, ok := ParseContainerLogName(e.Name()); ok {
				n.byCtr[id] = names
			}
		}
	}
	if d := n.cfg.PodLogDir; d != "-" {
		ents, err := os.ReadDir(d)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("read pod log directory: %w", err))
		}
		byPod := make(map[string]podDir, len(ents))
		for _, e := range ents {
			if ns, pod, uid, ok := ParsePodLogDir(e.Name()); ok && e.IsDir() {
				byPod[uid] = podDir{namespace: ns, name: pod, dir: filepath.Join(d, e.Name())}
			}
		}
		// Pods whose directory is gone (the kubelet removes it with the
		// pod) drop out; the rest is what exists.
		n.byPod = byPod
	}
	n.scanError = errors.Join(errs...)
}

// criLocked reads the container's OCI config from the CRI runtime's state,
// at most once per MinRefresh for an id it did not find.
func (n *Names) criLocked(id string, now time.Time) (K8sNames, bool) {
	if len(n.cfg.CRIConfigs) == 0 || !isHexID(id) {
		return K8sNames{}, false
	}
	if t, ok := n.criMiss[id]; ok && now.Sub(t) < n.cfg.MinRefresh {
		return K8sNames{}, false
	}
	for _, pattern := range n.cfg.CRIConfigs {
		if got, ok := readCRIConfig(fmt.Sprintf(pattern, id)); ok {
			delete(n.criMiss, id)
			return got, true
		}
	}
	if len(n.criMiss) > 4096 { // bound the misses kept: they are only a rate limit
		clear(n.criMiss)
	}
	n.criMiss[id] = now
	return K8sNames{}, false
}

// criAnnotations are the annotations containerd's CRI plugin and CRI-O put
// in a container's OCI config: namespace, pod, container.
var criAnnotations = [][3]string{
	{"io.kubernetes.cri.sandbox-namespace", "io.kubernetes.cri.sandbox-name", "io.kubernetes.cri.container-name"},
	{"io.kubernetes.pod.namespace", "io.kubernetes.pod.name", "io.kubernetes.container.name"},
}

// maxCRIConfig bounds what is read of one config.json (they are a few
// tens of KiB).
const maxCRIConfig = 4 << 20

func readCRIConfig(path string) (K8sNames, bool) {
	// The runtime's state is root's, but read as any file is: a regular
	// file only (never a FIFO left there), within a time and a size.
	f, err := userfile.OpenPath(context.Background(), path, userfile.Options{})
	if err != nil {
		return K8sNames{}, false
	}
	defer f.Close()
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.NewDecoder(io.LimitReader(f, maxCRIConfig)).Decode(&spec); err != nil {
		return K8sNames{}, false
	}
	for _, keys := range criAnnotations {
		got := K8sNames{Namespace: spec.Annotations[keys[0]], Pod: spec.Annotations[keys[1]], Container: spec.Annotations[keys[2]]}
		if got.Pod != "" && got.Namespace != "" {
			return got, true
		}
	}
	return K8sNames{}, false
}

// ParsePodLogDir reads a kubelet pod log directory's name,
// "<namespace>_<pod>_<uid>". Namespaces and pod names are DNS labels and
// subdomains, which cannot hold '_', so the split is unambiguous.
func ParsePodLogDir(name string) (namespace, pod, uid string, ok bool) {
	f := strings.Split(name, "_")
	if len(f) != 3 || f[0] == "" || f[1] == "" || !isUID(f[2]) {
		return "", "", "", false
	}
	return f[0], f[1], f[2], true
}

// ParseContainerLogName reads a kubelet container log symlink's name,
// "<pod>_<namespace>_<container>-<container id>.log".
func ParseContainerLogName(name string) (id string, names K8sNames, ok bool) {
	rest, ok := strings.CutSuffix(name, ".log")
	if !ok {
		return "", K8sNames{}, false
	}
	f := strings.Split(rest, "_")
	if len(f) != 3 || f[0] == "" || f[1] == "" {
		return "", K8sNames{}, false
	}
	i := strings.LastIndexByte(f[2], '-')
	if i <= 0 || !isHexID(f[2][i+1:]) {
		return "", K8sNames{}, false
	}
	return f[2][i+1:], K8sNames{Namespace: f[1], Pod: f[0], Container: f[2][:i]}, true
}
