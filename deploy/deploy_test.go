package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/spanwatch/spanwatch/internal/cgroup"
	"github.com/spanwatch/spanwatch/notify"
	"github.com/spanwatch/spanwatch/policy"
)

const manifestPath = "kubernetes/spanwatch.yaml"
const unitPath = "systemd/spanwatch.service"

// wantCaps is the set both deployments grant, and nothing else. Uprobes
// (the marker and USDT sources) attach through uprobe_multi links (6.6+),
// which need no CAP_SYS_ADMIN; older kernels need it added (see README.md
// and TestRunWithDeployedCapabilities).
var wantCaps = []string{"CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE"}

type manifest struct {
	namespace *corev1.Namespace
	sa        *corev1.ServiceAccount
	cm        *corev1.ConfigMap
	ds        *appsv1.DaemonSet
}

// loadManifest decodes the manifest strictly (decodeObjects) and checks
// that it holds the Namespace, ServiceAccount, ConfigMap and DaemonSet,
// and nothing else.
func loadManifest(t *testing.T) manifest {
	t.Helper()
	data, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeObjects(manifestPath, data)
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Namespace:
			m.namespace = o
		case *corev1.ServiceAccount:
			m.sa = o
		case *corev1.ConfigMap:
			m.cm = o
		case *appsv1.DaemonSet:
			m.ds = o
		default:
			t.Fatalf("%s: unexpected %T", manifestPath, o)
		}
	}
	if m.namespace == nil || m.sa == nil || m.cm == nil || m.ds == nil || len(objs) != 4 {
		t.Fatalf("%s: want a Namespace, ServiceAccount, ConfigMap and DaemonSet, got %d objects", manifestPath, len(objs))
	}
	return m
}

// kinds are the API types a rendering of the chart may hold, each
// decoded strictly into its Go type: Kubernetes' own (k8s.io/api) and
// prometheus-operator's (its monitoring/v1 API module).
var kinds = map[schema.GroupVersionKind]func() any{
	corev1.SchemeGroupVersion.WithKind("Namespace"):            func() any { return &corev1.Namespace{} },
	corev1.SchemeGroupVersion.WithKind("ServiceAccount"):       func() any { return &corev1.ServiceAccount{} },
	corev1.SchemeGroupVersion.WithKind("ConfigMap"):            func() any { return &corev1.ConfigMap{} },
	corev1.SchemeGroupVersion.WithKind("Secret"):               func() any { return &corev1.Secret{} },
	corev1.SchemeGroupVersion.WithKind("Service"):              func() any { return &corev1.Service{} },
	appsv1.SchemeGroupVersion.WithKind("DaemonSet"):            func() any { return &appsv1.DaemonSet{} },
	monitoringv1.SchemeGroupVersion.WithKind("ServiceMonitor"): func() any { return &monitoringv1.ServiceMonitor{} },
	monitoringv1.SchemeGroupVersion.WithKind("PodMonitor"):     func() any { return &monitoringv1.PodMonitor{} },
	monitoringv1.SchemeGroupVersion.WithKind("PrometheusRule"): func() any { return &monitoringv1.PrometheusRule{} },
}

// decodeObjects splits a multi-document YAML stream into its documents,
// skips those holding only comments (helm template writes some), and
// decodes each strictly (unknown, misspelt or duplicate fields are
// errors) into its API type.
func decodeObjects(name string, data []byte) ([]any, error) {
	var objs []any
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		if meta.APIVersion == "" && meta.Kind == "" && len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		gv, err := schema.ParseGroupVersion(meta.APIVersion)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		mk, ok := kinds[gv.WithKind(meta.Kind)]
		if !ok {
			return nil, fmt.Errorf("%s: document %d: unexpected %v", name, i, gv.WithKind(meta.Kind))
		}
		obj := mk()
		if err := decodeStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: document %d (%s): %w", name, i, meta.Kind, err)
		}
		objs = append(objs, obj)
	}
}

// stripComments drops the YAML comment lines of doc.
func stripComments(doc []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l...)
			out = append(out, '\n')
		}
	}
	return out
}

// decodeStrict decodes a YAML document the way the API server's strict
// field validation does: field names are case-sensitive, and unknown or
// duplicate fields are errors.
func decodeStrict(doc []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

func TestManifestDecodesStrictly(t *testing.T) {
	// What strict decoding catches: the check that guards the manifest
	// can fail.
	for _, bad := range []string{
		"spec:\n  template:\n    spec:\n      hostPid: true\n",    // wrong case
		"spec:\n  template:\n    spec:\n      hostPIDs: true\n",   // unknown
		"spec:\n  minReadySeconds: 1\n  minReadySeconds: 2\n",     // duplicate
		"spec:\n  template:\n    spec:\n      hostPID: \"yes\"\n", // wrong type
	} {
		if err := decodeStrict([]byte("apiVersion: apps/v1\nkind: DaemonSet\n"+bad), &appsv1.DaemonSet{}); err == nil {
			t.Errorf("strict decoding accepted %q", bad)
		}
	}
	loadManifest(t)
}

// TestManifestPrivileges checks the fields that decide what the agent may
// do: the host's PID namespace, exactly the deployed capabilities, nothing
// privileged, and the host mounts the collector reads.
func TestManifestPrivileges(t *testing.T) {
	m := loadManifest(t)
	ds := m.ds
	ns := m.namespace.Name
	for _, o := range []struct{ kind, ns string }{{"ServiceAccount", m.sa.Namespace}, {"ConfigMap", m.cm.Namespace}, {"DaemonSet", ds.Namespace}} {
		if o.ns != ns {
			t.Errorf("%s in namespace %q, want %q", o.kind, o.ns, ns)
		}
	}
	spec := ds.Spec.Template.Spec
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template's labels %v", k, v, ds.Spec.Template.Labels)
		}
	}
	if !spec.HostPID {
		t.Error("hostPID is false: the agent must see every process on the node")
	}
	if spec.HostNetwork || spec.HostIPC {
		t.Error("hostNetwork or hostIPC set: not needed")
	}
	if spec.ServiceAccountName != m.sa.Name {
		t.Errorf("serviceAccountName %q, want %q", spec.ServiceAccountName, m.sa.Name)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the service account token is mounted: the agent does not use the API server")
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Operator == corev1.TolerationOpExists && tl.Key == "" && tl.Effect == ""
	}) {
		t.Errorf("tolerations %v: want one that tolerates every taint (operator: Exists), so every node runs the agent", spec.Tolerations)
	}
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Fatalf("want one container and no init containers, got %d and %d", len(spec.Containers), len(spec.InitContainers))
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("container has no securityContext.capabilities")
	}
	if sc.Privileged == nil || *sc.Privileged {
		t.Error("privileged is not explicitly false")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities.drop = %v, want [ALL]", sc.Capabilities.Drop)
	}
	var added []string
	for _, c := range sc.Capabilities.Add {
		added = append(added, "CAP_"+string(c))
	}
	sort.Strings(added)
	if !slices.Equal(added, wantCaps) {
		t.Errorf("capabilities.add = %v, want %v", added, wantCaps)
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccompProfile = %v, want RuntimeDefault", sc.SeccompProfile)
	}
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Limits[res]; !ok {
			t.Errorf("no %s limit", res)
		}
		if _, ok := c.Resources.Requests[res]; !ok {
			t.Errorf("no %s request", res)
		}
	}

	// Host mounts: what the container sees at each path, and from where.
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, vm := range c.VolumeMounts {
		if _, ok := vols[vm.Name]; !ok {
			t.Errorf("volumeMount %s names no volume", vm.Name)
		}
		mounts[vm.MountPath] = vm
	}
	for _, want := range []struct {
		mountPath, hostPath string
		readOnly            bool
	}{
		{"/sys/kernel/tracing", "/sys/kernel/tracing", false},
		// The kubelet's log directories name pods and containers
		// (internal/cgroup.Names), read-only.
		{cgroup.DefaultPodLogDir, "/var/log/pods", true},
		{cgroup.DefaultContainerLogDir, "/var/log/containers", true},
		{"/host/sys/fs/cgroup", "/sys/fs/cgroup", true},
		{"/var/lib/spanwatch", "/var/lib/spanwatch", false},
	} {
		vm, ok := mounts[want.mountPath]
		if !ok {
			t.Errorf("nothing mounted at %s", want.mountPath)
			continue
		}
		hp := vols[vm.Name].HostPath
		if hp == nil || hp.Path != want.hostPath {
			t.Errorf("%s: volume %s is not hostPath %s", want.mountPath, vm.Name, want.hostPath)
		}
		if vm.ReadOnly != want.readOnly {
			t.Errorf("%s: readOnly = %v, want %v", want.mountPath, vm.ReadOnly, want.readOnly)
		}
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil && (v.HostPath.Path == "/" || v.HostPath.Path == "/proc" || v.HostPath.Path == "/sys") {
			t.Errorf("volume %s mounts the host's %s: too broad", v.Name, v.HostPath.Path)
		}
	}

	// The rules come from the ConfigMap, at the path --rules names.
	args := flagArgs(c.Args[1:])
	rules := args["config"]
	vm, ok := mounts[filepath.Dir(rules)]
	if !ok || vols[vm.Name].ConfigMap == nil || vols[vm.Name].ConfigMap.Name != m.cm.Name {
		t.Fatalf("--config=%s is not in a mount of ConfigMap %s", rules, m.cm.Name)
	}
	if _, ok := m.cm.Data[filepath.Base(rules)]; !ok {
		t.Errorf("ConfigMap %s has no key %s", m.cm.Name, filepath.Base(rules))
	}
	// The metrics port is the one the agent listens on.
	_, port, err := net.SplitHostPort(args["metrics-addr"])
	if err != nil {
		t.Fatalf("--metrics-addr: %v", err)
	}
	if len(c.Ports) != 1 || fmt.Sprint(c.Ports[0].ContainerPort) != port {
		t.Errorf("container ports %v, want one on %s (--metrics-addr)", c.Ports, port)
	}
	if ann := ds.Spec.Template.Annotations["prometheus.io/port"]; ann != port {
		t.Errorf("prometheus.io/port annotation %q, want %s", ann, port)
	}
	// The listener: every address of the pod (Prometheus on the pod IP,
	// kubectl on loopback), never the host's network; the probe on the
	// free endpoint, not on /metrics (which takes a scrape slot).
	if host, _, _ := net.SplitHostPort(args["metrics-addr"]); host != "" || ds.Spec.Template.Spec.HostNetwork {
		t.Errorf("--metrics-addr=%s, hostNetwork %v: want every address of the pod's own network", args["metrics-addr"], ds.Spec.Template.Spec.HostNetwork)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/-/healthy" || p.HTTPGet.Port.String() != c.Ports[0].Name {
		t.Errorf("liveness probe %+v, want GET /-/healthy on the metrics port", p)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/-/ready" || p.HTTPGet.Port.String() != c.Ports[0].Name {
		t.Errorf("readiness probe %+v, want GET /-/ready on the metrics port", p)
	}
	if c.Args[0] != "run" {
		t.Errorf("args start with %q, want run", c.Args[0])
	}
	var cgroupRoot string
	for _, e := range c.Env {
		if e.Name == cgroup.RootEnv {
			cgroupRoot = e.Value
		}
	}
	if vm := mounts[cgroupRoot]; vm.Name == "" || vols[vm.Name].HostPath == nil || vols[vm.Name].HostPath.Path != "/sys/fs/cgroup" {
		t.Errorf("%s=%q is not the mount of the host's /sys/fs/cgroup", cgroup.RootEnv, cgroupRoot)
	}
}

// flagArgs turns ["--a=b", "--c=d"] into {a: b, c: d}.
func flagArgs(args []string) map[string]string {
	m := map[string]string{}
	for _, a := range args {
		k, v, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		m[k] = v
	}
	return m
}

// TestManifestRules parses the ConfigMap's rule file with spanwatch's own
// rule and webhook parsers, and checks that alerts go to every replica of
// an in-cluster Alertmanager through its API.
func TestManifestRules(t *testing.T) {
	m := loadManifest(t)
	data := m.cm.Data["rules.yaml"]
	cfg, err := policy.Parse("rules.yaml", []byte(data), policy.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("ConfigMap rules.yaml: %v", err)
	}
	if len(cfg.Budgets) == 0 || len(cfg.Rules) == 0 {
		t.Errorf("rules.yaml has %d budgets and %d rules, want some of each", len(cfg.Budgets), len(cfg.Rules))
	}
	nc, err := notify.ParseConfigFile("rules.yaml", []byte(data))
	if err != nil {
		t.Fatalf("ConfigMap rules.yaml webhooks: %v", err)
	}
	if len(nc.Webhooks) < 2 {
		t.Errorf("%d webhooks: want one per Alertmanager replica", len(nc.Webhooks))
	}
	hosts := map[string]bool{}
	for _, w := range nc.Webhooks {
		if w.Format != notify.FormatAlertmanagerAPI {
			t.Errorf("webhook %s: format %q, want %q", w.Name, w.Format, notify.FormatAlertmanagerAPI)
		}
		u, err := url.Parse(w.URL)
		if err != nil {
			t.Fatalf("webhook %s: %v", w.Name, err)
		}
		if !strings.HasSuffix(u.Hostname(), ".svc") || u.Path != "/api/v2/alerts" {
			t.Errorf("webhook %s: %s is not an in-cluster Alertmanager's /api/v2/alerts", w.Name, w.URL)
		}
		hosts[u.Host] = true
	}
	if len(hosts) != len(nc.Webhooks) {
		t.Errorf("webhooks share hosts: %v", hosts)
	}
	if got := nc.Routing.Outbox.Path; filepath.Dir(got) != "/var/lib/spanwatch" {
		t.Errorf("outbox %s is not on the persistent /var/lib/spanwatch mount", got)
	}
}

// unit is a parsed systemd unit: section -> key -> values in order.
type unit map[string]map[string][]string

func loadUnit(t *testing.T) unit {
	t.Helper()
	data, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	u := unit{}
	sec := ""
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			sec = line[1 : len(line)-1]
			u[sec] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || sec == "" {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", unitPath, i+1, line)
			}
			u[sec][k] = append(u[sec][k], v)
		}
	}
	return u
}

func (u unit) get(sec, key string) string { return strings.Join(u[sec][key], " ") }

// TestUnitPrivileges checks that the unit grants the manifest's capabilities
// capabilities and nothing else, and keeps the hardening that BPF allows.
func TestUnitPrivileges(t *testing.T) {
	u := loadUnit(t)
	for _, key := range []string{"CapabilityBoundingSet", "AmbientCapabilities"} {
		got := strings.Fields(u.get("Service", key))
		sort.Strings(got)
		if !slices.Equal(got, wantCaps) {
			t.Errorf("%s = %v, want %v", key, got, wantCaps)
		}
	}
	for key, want := range map[string]string{
		"NoNewPrivileges":      "yes",
		"ProtectSystem":        "strict",
		"StateDirectory":       "spanwatch",
		"PrivateTmp":           "yes",
		"ProtectKernelModules": "yes",
		"ProtectControlGroups": "yes",
		"LimitMEMLOCK":         "infinity",
	} {
		if got := u.get("Service", key); got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	if u.get("Service", "User") != "" || u.get("Service", "DynamicUser") != "" {
		t.Error("the unit changes user: tracefs (mode 0700) needs root's uid")
	}
	// The syscall filter must not take away what BPF tracing uses.
	filter := u.get("Service", "SystemCallFilter")
	for _, set := range []string{"@debug", "@privileged", "@system-service"} {
		if strings.HasPrefix(filter, "~") && strings.Contains(filter, set) {
			t.Errorf("SystemCallFilter denies %s, which holds bpf or perf_event_open", set)
		}
	}
	args := flagArgs(strings.Fields(u.get("Service", "ExecStart"))[2:])
	host, _, err := net.SplitHostPort(args["metrics-addr"])
	if err != nil || !net.ParseIP(host).IsLoopback() {
		t.Errorf("--metrics-addr=%s: the unit should serve metrics on loopback", args["metrics-addr"])
	}
}

// TestUnitVerify runs systemd-analyze verify on the unit, with ExecStart
// pointing at a freshly built spanwatch (verify checks that it exists).
func TestUnitVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (Debian package systemd)")
	}
	bin := spanwatchBinary(t)
	data, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.ReplaceAll(data, []byte("/usr/local/bin/spanwatch"), []byte(bin))
	dir := t.TempDir()
	p := filepath.Join(dir, "spanwatch.service")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", p).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

var buildOnce struct {
	sync.Once
	bin string
	err error
	dir string
}

// spanwatchBinary builds cmd/spanwatch once per test run.
func spanwatchBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildOnce.dir, buildOnce.err = os.MkdirTemp("", "spanwatch-deploy-test")
		if buildOnce.err != nil {
			return
		}
		buildOnce.bin = filepath.Join(buildOnce.dir, "spanwatch")
		out, err := exec.Command("go", "build", "-o", buildOnce.bin, "github.com/spanwatch/spanwatch/cmd/spanwatch").CombinedOutput()
		if err != nil {
			buildOnce.err = fmt.Errorf("go build cmd/spanwatch: %v\n%s", err, out)
		}
	})
	if buildOnce.err != nil {
		t.Fatal(buildOnce.err)
	}
	return buildOnce.bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildOnce.dir != "" {
		os.RemoveAll(buildOnce.dir)
	}
	os.Exit(code)
}

// TestFlagsExist checks that every flag the manifest and the unit pass to
// spanwatch run is one the built binary knows.
func TestFlagsExist(t *testing.T) {
	m := loadManifest(t)
	unitArgs := strings.Fields(loadUnit(t).get("Service", "ExecStart"))
	checkFlags(t, "manifest", m.ds.Spec.Template.Spec.Containers[0].Args)
	checkFlags(t, "unit", unitArgs[1:])
}

// checkFlags checks that args are "run" and flags the built binary's run
// command knows.
func checkFlags(t *testing.T, where string, args []string) {
	t.Helper()
	bin := spanwatchBinary(t)
	out, err := exec.Command(bin, "help", "run").CombinedOutput()
	if err != nil {
		t.Fatalf("spanwatch help run: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Usage: spanwatch run") {
		t.Skipf("this build has no run command:\n%s", out)
	}
	if len(args) == 0 || args[0] != "run" {
		t.Errorf("%s: command %q, want run", where, args)
		return
	}
	for flag := range flagArgs(args[1:]) {
		if !regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(flag) + `[ \t\n]`).Match(out) {
			t.Errorf("%s: spanwatch run has no flag --%s", where, flag)
		}
	}
}

// TestManifestValues checks what the API server would refuse on admission
// and strict decoding does not: names, labels and port names by
// apimachinery's own validation, and requests within limits.
func TestManifestValues(t *testing.T) {
	m := loadManifest(t)
	for _, meta := range []metav1.ObjectMeta{m.namespace.ObjectMeta, m.sa.ObjectMeta, m.cm.ObjectMeta, m.ds.ObjectMeta, m.ds.Spec.Template.ObjectMeta} {
		if meta.Name != "" {
			for _, msg := range validation.IsDNS1123Subdomain(meta.Name) {
				t.Errorf("name %q: %s", meta.Name, msg)
			}
		}
		for k, v := range meta.Labels {
			for _, msg := range append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...) {
				t.Errorf("label %s=%s: %s", k, v, msg)
			}
		}
	}
	for _, msg := range validation.IsDNS1123Label(m.namespace.Name) {
		t.Errorf("namespace %q: %s", m.namespace.Name, msg)
	}
	for k := range m.cm.Data {
		for _, msg := range validation.IsConfigMapKey(k) {
			t.Errorf("ConfigMap key %q: %s", k, msg)
		}
	}
	spec := m.ds.Spec.Template.Spec
	for _, c := range spec.Containers {
		for _, msg := range validation.IsDNS1123Label(c.Name) {
			t.Errorf("container %q: %s", c.Name, msg)
		}
		for _, p := range c.Ports {
			for _, msg := range validation.IsValidPortName(p.Name) {
				t.Errorf("port %q: %s", p.Name, msg)
			}
		}
		for res, req := range c.Resources.Requests {
			if lim, ok := c.Resources.Limits[res]; ok && req.Cmp(lim) > 0 {
				t.Errorf("%s request %s above its limit %s", res, req.String(), lim.String())
			}
		}
	}
	for _, v := range spec.Volumes {
		for _, msg := range validation.IsDNS1123Label(v.Name) {
			t.Errorf("volume %q: %s", v.Name, msg)
		}
	}
}
