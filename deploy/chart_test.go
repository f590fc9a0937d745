package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/exporter-toolkit/web"
	"golang.org/x/crypto/bcrypt"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const chartPath = "helm/spanwatch"

// tool returns the path of a program deploy/tools.sh builds, or skips the
// test when it is not built (CI builds them: .ci/install-deps.sh).
func tool(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("./tools.sh", "path", name).Output()
	if err != nil {
		t.Skipf("%s is not built: run deploy/tools.sh install (.ci/install-deps.sh does)", name)
	}
	return strings.TrimSpace(string(out))
}

// helmOutput runs helm and returns its standard output; its standard
// error may say only that the chart's files/ are symbolic links.
func helmOutput(t *testing.T, args ...string) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(tool(t, "helm"), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if l != "" && !strings.Contains(l, "found symbolic link in path") {
			t.Errorf("helm %s said: %s", strings.Join(args, " "), l)
		}
	}
	return stdout.Bytes()
}

// TestChartLint runs helm lint --strict on the chart, with its defaults
// and with every optional part on.
func TestChartLint(t *testing.T) {
	for _, set := range [][]string{nil, everything} {
		args := []string{"lint", "--strict", chartPath}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out := helmOutput(t, args...)
		if !strings.Contains(string(out), "1 chart(s) linted, 0 chart(s) failed") {
			t.Errorf("helm lint %v:\n%s", set, out)
		}
	}
	// The values' schema catches a misspelt key.
	cmd := exec.Command(tool(t, "helm"), "template", "x", chartPath, "--set", "probes.mod=tcp")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "additional properties 'mod' not allowed") {
		t.Errorf("a misspelt value was accepted: %v\n%s", err, out)
	}
}

// everything turns every optional part of the chart on.
var everything = []string{
	"serviceMonitor.enabled=true", "podMonitor.enabled=true", "prometheusRule.enabled=true", "dashboard.enabled=true",
	"serviceMonitor.scrapeProtocols={PrometheusProto,PrometheusText0.0.4}", "serviceMonitor.labels.release=kube-prometheus-stack",
}

// rendering is one helm template of the chart, decoded.
type rendering struct {
	raw  []byte
	objs []any
	ds   *appsv1.DaemonSet
}

func (r *rendering) container() corev1.Container { return r.ds.Spec.Template.Spec.Containers[0] }

// find returns the objects of type T.
func find[T any](r *rendering) []*T {
	var out []*T
	for _, o := range r.objs {
		if x, ok := o.(*T); ok {
			out = append(out, x)
		}
	}
	return out
}

// render runs helm template with the given --set values and extra
// arguments, and decodes every object strictly into its API type.
func render(t *testing.T, set []string, extra ...string) *rendering {
	t.Helper()
	args := append([]string{"template", "sw", chartPath, "--namespace", "obs"}, extra...)
	for _, s := range set {
		args = append(args, "--set", s)
	}
	raw := helmOutput(t, args...)
	objs, err := decodeObjects("helm template", raw)
	if err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	r := &rendering{raw: raw, objs: objs}
	ds := find[appsv1.DaemonSet](r)
	if len(ds) != 1 || len(ds[0].Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want one DaemonSet with one container:\n%s", raw)
	}
	r.ds = ds[0]
	return r
}

// kubeValidate runs kubectl-validate on the rendering's Kubernetes
// objects: each against the OpenAPI schema of Kubernetes 1.30 that the
// tool embeds (field names, types, formats, required fields, names), as
// the API server would check them on admission. prometheus-operator's
// kinds have no schema there: decodeObjects decoded them strictly into
// the operator's own Go types.
func kubeValidate(t *testing.T, r *rendering) {
	t.Helper()
	var docs [][]byte
	for _, doc := range bytes.Split(r.raw, []byte("\n---\n")) {
		if !bytes.Contains(doc, []byte("apiVersion: monitoring.coreos.com/")) && len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
	f := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(f, bytes.Join(docs, []byte("\n---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool(t, "kubectl-validate"), "--version", "1.30", f).CombinedOutput()
	if err != nil {
		t.Errorf("kubectl-validate: %v\n%s", err, out)
	}
}

// TestChartRenders renders the chart with its defaults and with each
// group of values a platform team sets, validates every rendering
// (decodeObjects, kubectl-validate), and checks what each value does.
func TestChartRenders(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		set   []string
		extra []string
		check func(t *testing.T, r *rendering)
	}{
		{"defaults", nil, nil, func(t *testing.T, r *rendering) {
			c := r.container()
			if c.Image != "ghcr.io/spanwatch/spanwatch:"+releaseVersion(t) {
				t.Errorf("image %s, want the chart's appVersion", c.Image)
			}
			wantProbes(t, c, "HTTP")
			if len(find[corev1.Namespace](r))+len(find[corev1.Secret](r))+len(find[corev1.Service](r)) != 0 {
				t.Error("the defaults render a Namespace, Secret or Service")
			}
			if slices.Contains(c.Args, "--web.config.file=/etc/spanwatch-web/web.yml") {
				t.Error("--web.config.file without a web configuration")
			}
			if !slices.ContainsFunc(r.ds.Spec.Template.Spec.Tolerations, func(tl corev1.Toleration) bool { return tl.Operator == corev1.TolerationOpExists && tl.Key == "" }) {
				t.Error("the defaults do not tolerate every taint")
			}
			if r.ds.Labels["app.kubernetes.io/managed-by"] != "Helm" {
				t.Errorf("labels %v: want Helm's", r.ds.Labels)
			}
		}},
		{"monitoring", everything, nil, func(t *testing.T, r *rendering) {
			pod := r.ds.Spec.Template.Labels
			svcs := find[corev1.Service](r)
			sms := find[monitoringv1.ServiceMonitor](r)
			pms := find[monitoringv1.PodMonitor](r)
			rules := find[monitoringv1.PrometheusRule](r)
			if len(svcs) != 1 || len(sms) != 1 || len(pms) != 1 || len(rules) != 1 {
				t.Fatalf("%d Services, %d ServiceMonitors, %d PodMonitors, %d PrometheusRules: want one of each", len(svcs), len(sms), len(pms), len(rules))
			}
			svc, sm, pm := svcs[0], sms[0], pms[0]
			if !selects(svc.Spec.Selector, pod) || svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.Ports[0].TargetPort.String() != "metrics" {
				t.Errorf("Service %+v does not select the agents' pods on their metrics port, headless", svc.Spec)
			}
			if !selects(sm.Spec.Selector.MatchLabels, svc.Labels) || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Path != "/metrics" {
				t.Errorf("ServiceMonitor %+v does not scrape the Service's metrics port", sm.Spec)
			}
			if sm.Labels["release"] != "kube-prometheus-stack" || !slices.Equal(sm.Spec.ScrapeProtocols, []monitoringv1.ScrapeProtocol{"PrometheusProto", "PrometheusText0.0.4"}) {
				t.Errorf("ServiceMonitor labels %v, scrapeProtocols %v: not the values'", sm.Labels, sm.Spec.ScrapeProtocols)
			}
			if !selects(pm.Spec.Selector.MatchLabels, pod) || pm.Spec.PodMetricsEndpoints[0].Port == nil || *pm.Spec.PodMetricsEndpoints[0].Port != "metrics" {
				t.Errorf("PodMonitor %+v does not scrape the pods' metrics port", pm.Spec)
			}
			// The PrometheusRule holds deploy/prometheus's rules, each
			// group and rule as the file has it.
			var file struct {
				Groups []monitoringv1.RuleGroup `json:"groups"`
			}
			data, err := os.ReadFile("prometheus/spanwatch.rules.yml")
			if err != nil {
				t.Fatal(err)
			}
			if err := decodeStrict(data, &file); err != nil {
				t.Fatal(err)
			}
			if len(file.Groups) == 0 || !reflect.DeepEqual(rules[0].Spec.Groups, file.Groups) {
				t.Errorf("the PrometheusRule's groups differ from prometheus/spanwatch.rules.yml")
			}
			// The dashboard ConfigMap holds deploy/grafana's dashboard,
			// labelled for Grafana's sidecar.
			var dash *corev1.ConfigMap
			for _, cm := range find[corev1.ConfigMap](r) {
				if cm.Labels["grafana_dashboard"] == "1" {
					dash = cm
				}
			}
			want, err := os.ReadFile("grafana/spanwatch.json")
			if err != nil {
				t.Fatal(err)
			}
			if dash == nil || strings.TrimSpace(dash.Data["spanwatch.json"]) != strings.TrimSpace(string(want)) || !json.Valid([]byte(dash.Data["spanwatch.json"])) {
				t.Error("no ConfigMap labelled grafana_dashboard=1 holding grafana/spanwatch.json")
			}
		}},
		{"basic auth", []string{"webConfig.config.basic_auth_users.prometheus=" + string(hash)}, nil, func(t *testing.T, r *rendering) {
			c := r.container()
			wantProbes(t, c, "tcp")
			secret := webSecret(t, r, "sw-spanwatch-web")
			// What the Secret holds is a web configuration that
			// exporter-toolkit accepts, with the user's hash.
			f := filepath.Join(t.TempDir(), "web.yml")
			if err := os.WriteFile(f, []byte(secret.StringData["web.yml"]), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := web.Validate(f); err != nil {
				t.Errorf("web.yml from the chart: %v\n%s", err, secret.StringData["web.yml"])
			}
			if !strings.Contains(secret.StringData["web.yml"], string(hash)) {
				t.Errorf("web.yml lacks the user's hash:\n%s", secret.StringData["web.yml"])
			}
		}},
		{"tls", []string{"webConfig.config.tls_server_config.cert_file=/etc/spanwatch-web/tls.crt", "webConfig.config.tls_server_config.key_file=/etc/spanwatch-web/tls.key",
			"webConfig.files.tls\\.crt=CERT", "webConfig.files.tls\\.key=KEY"}, nil, func(t *testing.T, r *rendering) {
			wantProbes(t, r.container(), "HTTPS")
			s := webSecret(t, r, "sw-spanwatch-web")
			if s.StringData["tls.crt"] != "CERT" || s.StringData["tls.key"] != "KEY" {
				t.Errorf("the Secret lacks the files: %v", s.StringData)
			}
		}},
		{"client certificates", []string{"webConfig.config.tls_server_config.cert_file=/etc/spanwatch-web/tls.crt", "webConfig.config.tls_server_config.key_file=/etc/spanwatch-web/tls.key",
			"webConfig.config.tls_server_config.client_auth_type=RequireAndVerifyClientCert"}, nil, func(t *testing.T, r *rendering) {
			wantProbes(t, r.container(), "tcp")
		}},
		{"existing secret", []string{"webConfig.existingSecret=mine", "probes.mode=https"}, nil, func(t *testing.T, r *rendering) {
			wantProbes(t, r.container(), "HTTPS")
			if len(find[corev1.Secret](r)) != 0 {
				t.Error("a Secret is rendered beside the existing one")
			}
			webSecret(t, r, "mine")
		}},
		{"placement and image", []string{"image.digest=sha256:" + strings.Repeat("ab", 32), "nodeSelector.pool=apps", "tolerations=null", "extraCapabilities={SYS_ADMIN}",
			"resources.limits.memory=1Gi", "extraArgs={--no-uprobe-multi}", "config.existingConfigMap=my-rules", "priorityClassName="}, nil, func(t *testing.T, r *rendering) {
			c := r.container()
			spec := r.ds.Spec.Template.Spec
			if c.Image != "ghcr.io/spanwatch/spanwatch@sha256:"+strings.Repeat("ab", 32) {
				t.Errorf("image %s: want the digest", c.Image)
			}
			if spec.NodeSelector["pool"] != "apps" || len(spec.Tolerations) != 0 || spec.PriorityClassName != "" {
				t.Errorf("nodeSelector %v, tolerations %v, priorityClassName %q: not the values'", spec.NodeSelector, spec.Tolerations, spec.PriorityClassName)
			}
			if !slices.Contains(c.SecurityContext.Capabilities.Add, "SYS_ADMIN") || c.Resources.Limits.Memory().String() != "1Gi" || !slices.Contains(c.Args, "--no-uprobe-multi") {
				t.Errorf("capabilities %v, limits %v, args %v: not the values'", c.SecurityContext.Capabilities.Add, c.Resources.Limits, c.Args)
			}
			if len(find[corev1.ConfigMap](r)) != 0 || spec.Volumes[0].ConfigMap == nil || spec.Volumes[0].ConfigMap.Name != "my-rules" {
				t.Errorf("config.existingConfigMap: volumes %+v", spec.Volumes[0])
			}
		}},
		{"kubernetes 1.29", nil, []string{"--kube-version", "1.29.0"}, func(t *testing.T, r *rendering) {
			if r.container().SecurityContext.AppArmorProfile != nil || r.ds.Spec.Template.Annotations["container.apparmor.security.beta.kubernetes.io/spanwatch"] != "unconfined" {
				t.Errorf("before 1.30: want the AppArmor annotation, not the field")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, tc.set, tc.extra...)
			kubeValidate(t, r)
			checkPodInvariants(t, r)
			tc.check(t, r)
		})
	}
}

// checkPodInvariants checks what every rendering keeps whatever the
// values: the privileges, and every flag one the binary knows.
func checkPodInvariants(t *testing.T, r *rendering) {
	t.Helper()
	c := r.container()
	spec := r.ds.Spec.Template.Spec
	if !spec.HostPID || spec.HostNetwork || (spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken) {
		t.Errorf("hostPID %v, hostNetwork %v, token mounted: want the host's PIDs only", spec.HostPID, spec.HostNetwork)
	}
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("securityContext %+v: want unprivileged, all capabilities dropped", sc)
	}
	for _, want := range []corev1.Capability{"BPF", "PERFMON", "SYS_PTRACE"} {
		if !slices.Contains(sc.Capabilities.Add, want) {
			t.Errorf("capabilities.add %v lacks %s", sc.Capabilities.Add, want)
		}
	}
	if !selects(r.ds.Spec.Selector.MatchLabels, r.ds.Spec.Template.Labels) {
		t.Errorf("the selector %v does not select the pod's labels %v", r.ds.Spec.Selector.MatchLabels, r.ds.Spec.Template.Labels)
	}
	checkFlags(t, "helm template", c.Args)
}

// wantProbes checks the liveness and readiness probes: GET /-/healthy and
// /-/ready with scheme HTTP or HTTPS, or ("tcp") TCP connections to the
// metrics port.
func wantProbes(t *testing.T, c corev1.Container, scheme string) {
	t.Helper()
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{c.LivenessProbe, "/-/healthy"}, {c.ReadinessProbe, "/-/ready"}} {
		switch {
		case p.probe == nil:
			t.Errorf("no probe for %s", p.path)
		case scheme == "tcp":
			if p.probe.TCPSocket == nil || p.probe.HTTPGet != nil || p.probe.TCPSocket.Port.String() != "metrics" {
				t.Errorf("probe %+v, want a TCP connection to the metrics port", p.probe.ProbeHandler)
			}
		default:
			if g := p.probe.HTTPGet; g == nil || g.Path != p.path || string(g.Scheme) != scheme || g.Port.String() != "metrics" {
				t.Errorf("probe %+v, want %s %s on the metrics port", p.probe.ProbeHandler, scheme, p.path)
			}
		}
	}
}

// webSecret checks that the agent reads its web configuration from the
// named Secret, and returns that Secret when the chart rendered it.
func webSecret(t *testing.T, r *rendering, name string) *corev1.Secret {
	t.Helper()
	c := r.container()
	if !slices.Contains(c.Args, "--web.config.file=/etc/spanwatch-web/web.yml") {
		t.Errorf("args %v: no --web.config.file", c.Args)
	}
	var vol string
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/etc/spanwatch-web" && m.ReadOnly {
			vol = m.Name
		}
	}
	found := false
	for _, v := range r.ds.Spec.Template.Spec.Volumes {
		if v.Name == vol && v.Secret != nil && v.Secret.SecretName == name {
			found = true
		}
	}
	if !found {
		t.Errorf("Secret %s is not mounted read-only at /etc/spanwatch-web", name)
	}
	for _, s := range find[corev1.Secret](r) {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestManifestIsChartRendering checks that kubernetes/spanwatch.yaml is
// exactly what kubernetes/generate.sh renders from the chart now: the
// manifest is generated, never edited by hand.
func TestManifestIsChartRendering(t *testing.T) {
	tool(t, "helm")
	out, err := exec.Command("kubernetes/generate.sh", "--stdout").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("kubernetes/generate.sh --stdout: %v\n%s", err, stderr)
	}
	have, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, have) {
		t.Errorf("%s is not the chart's rendering: run deploy/kubernetes/generate.sh and commit it\n%s", manifestPath, firstDiff(have, out))
	}
	r := &rendering{raw: out}
	kubeValidate(t, r)
}

// firstDiff says where two texts first differ, by line.
func firstDiff(a, b []byte) string {
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n  committed: %q\n  rendered:  %q", i+1, x, y)
		}
	}
	return "they differ"
}

// The chart's own documents decode as YAML (helm template would fail
// first otherwise); Chart.yaml is read by the versions test.
type chartMeta struct {
	Version    string `json:"version"`
	AppVersion string `json:"appVersion"`
}

func readChart(t *testing.T) chartMeta {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartPath, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c chartMeta
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return c
}
