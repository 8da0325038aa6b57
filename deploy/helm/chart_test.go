package helm_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// chartMeta is Chart.yaml's part the tests read.
func chartMeta(t *testing.T) (version, appVersion string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c.Version, c.AppVersion
}

func envOf(c *corev1.Container) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		m[e.Name] = e
	}
	return m
}

// The invariants every rendering keeps, on each values file of the chart's ci/ folder and on a
// single pod without PostgreSQL.
func TestChartRendersValidObjects(t *testing.T) {
	_, appVersion := chartMeta(t)
	cases := []struct {
		name        string
		values      []string
		sets        []string
		replicas    int32 // 0: autoscaled
		postgres    bool
		chartSecret bool // the chart renders the DSN Secret
		grace       time.Duration
	}{
		{name: "defaults with a DSN", values: []string{ciValues("default-values.yaml")}, replicas: 2, postgres: true, chartSecret: true, grace: 30 * time.Second},
		{name: "3 replicas on an existing Secret", values: []string{ciValues("replicas-existing-secret-values.yaml")}, replicas: 3, postgres: true, grace: 2 * time.Minute},
		{name: "autoscaling and ServiceMonitor on", values: []string{ciValues("autoscaling-servicemonitor-values.yaml")}, postgres: true, grace: 30 * time.Second},
		{name: "one pod on files", sets: []string{"replicaCount=1"}, replicas: 1, grace: 30 * time.Second},
		{name: "the chart's own defaults", replicas: 1, grace: 30 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := render(t, chartDir, tc.values, tc.sets...)
			if err != nil {
				t.Fatal(err)
			}
			d, c := r.deployment(t)
			checkReplicas(t, r, d.Spec.Replicas, tc.replicas)
			checkPod(t, d.Spec.Template.Spec, c, appVersion, tc.grace)
			checkStores(t, r, c, tc.postgres, tc.chartSecret)
			checkNoSecretInPlainSight(t, r)
			checkServices(t, r, c)
			if !strings.Contains(r.Notes, "ANTHROPIC_BASE_URL=http://ctxproxy.gateway.svc:8080") {
				t.Errorf("NOTES do not say how to point an agent at it:\n%s", r.Notes)
			}
		})
	}
}

// checkServices: the agents' Service exposes the proxy's port only; /metrics
// (every tenant's name, spend and caps) has a Service of its own, on the
// container's metrics port.
func checkServices(t *testing.T, r *rendered, c *corev1.Container) {
	t.Helper()
	ports := map[string][]corev1.ServicePort{}
	for _, s := range r.Services {
		ports[s.Name] = s.Spec.Ports
	}
	if p := ports["ctxproxy"]; len(p) != 1 || p[0].Port != 8080 || p[0].TargetPort.StrVal != "http" {
		t.Errorf("the agents' Service: %+v", p)
	}
	if p := ports["ctxproxy-metrics"]; len(p) != 1 || p[0].TargetPort.StrVal != "metrics" || p[0].Port != containerPort(c, "metrics") || p[0].Port == 0 {
		t.Errorf("the metrics Service: %+v (container ports %+v)", p, c.Ports)
	}
	if len(r.Services) != 2 {
		t.Errorf("%d Services, want the agents' and the metrics'", len(r.Services))
	}
}

// selected is the Services whose labels match a selector's.
func selected(r *rendered, match map[string]string) []*corev1.Service {
	var out []*corev1.Service
next:
	for _, s := range r.Services {
		for k, v := range match {
			if s.Labels[k] != v {
				continue next
			}
		}
		out = append(out, s)
	}
	return out
}

func checkReplicas(t *testing.T, r *rendered, replicas *int32, want int32) {
	t.Helper()
	if want == 0 {
		if replicas != nil {
			t.Errorf("an autoscaled Deployment sets replicas %d", *replicas)
		}
		if len(r.HPAs) != 1 || r.HPAs[0].Spec.MaxReplicas != 6 || *r.HPAs[0].Spec.MinReplicas != 2 {
			t.Errorf("HPAs: %+v", r.HPAs)
		}
		if len(r.ServiceMonitors) != 1 || r.ServiceMonitors[0].Spec.Endpoints[0].Path != "/metrics" || r.ServiceMonitors[0].Labels["release"] != "prometheus" ||
			r.ServiceMonitors[0].Spec.Endpoints[0].Port != "metrics" {
			t.Errorf("ServiceMonitors: %+v", r.ServiceMonitors)
		} else if got := selected(r, r.ServiceMonitors[0].Spec.Selector.MatchLabels); len(got) != 1 || got[0].Name != "ctxproxy-metrics" {
			t.Errorf("the ServiceMonitor selects Services %v, want ctxproxy-metrics only", got)
		}
	} else {
		if replicas == nil || *replicas != want {
			t.Errorf("replicas %v, want %d", replicas, want)
		}
		if len(r.HPAs)+len(r.ServiceMonitors) != 0 {
			t.Errorf("an HPA or ServiceMonitor nobody asked for")
		}
	}
	if want == 1 {
		if len(r.PDBs) != 0 {
			t.Error("a PodDisruptionBudget for one pod blocks every node drain")
		}
		return
	}
	if len(r.PDBs) != 1 || r.PDBs[0].Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PDBs: %+v", r.PDBs)
	}
}

func checkPod(t *testing.T, pod corev1.PodSpec, c *corev1.Container, appVersion string, grace time.Duration) {
	t.Helper()
	if c.Image != "ghcr.io/ctxproxy/ctxproxy:"+appVersion {
		t.Errorf("image %s, want the chart's appVersion %s", c.Image, appVersion)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("probes: liveness %+v readiness %+v", c.LivenessProbe, c.ReadinessProbe)
	}
	sc := c.SecurityContext
	if sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("container security context: %+v", sc)
	}
	if ps := pod.SecurityContext; ps == nil || !*ps.RunAsNonRoot || *ps.RunAsUser == 0 {
		t.Errorf("pod security context: %+v", ps)
	}
	env := envOf(c)
	if got := env["CTXPROXY_SHUTDOWN_GRACE"].Value; got != grace.String() && got != strings.TrimSuffix(grace.String(), "0s") {
		t.Errorf("CTXPROXY_SHUTDOWN_GRACE %q, want %s", got, grace)
	}
	preStop := c.Lifecycle.PreStop.Sleep.Seconds
	if tg := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second; tg <= grace+time.Duration(preStop)*time.Second {
		t.Errorf("terminationGracePeriodSeconds %s is not longer than --shutdown-grace %s plus the preStop pause %ds", tg, grace, preStop)
	}
	if preStop < 1 {
		t.Errorf("preStop pause %d s", preStop)
	}
	aa := pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if len(aa) != 1 || aa[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("anti-affinity: %+v", aa)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources: %+v", c.Resources)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	if m, ok := mounts["/policies"]; !ok || !m.ReadOnly || env["CTXPROXY_POLICIES"].Value != "/policies" {
		t.Errorf("policies mount %+v, CTXPROXY_POLICIES %q", m, env["CTXPROXY_POLICIES"].Value)
	}
}

// checkStores: with PostgreSQL both stores read the DSN from a Secret, and a hook Job migrates
// before the rollout, reading a Secret that exists by then; without it both are files under /data.
func checkStores(t *testing.T, r *rendered, c *corev1.Container, postgres, chartSecret bool) {
	t.Helper()
	env := envOf(c)
	mem, led := env["CTXPROXY_MEMORY_STORE"], env["CTXPROXY_LEDGER"]
	if !postgres {
		if mem.Value != "file" || led.Value != "file:/data/ledger.jsonl" || len(r.Jobs) != 0 {
			t.Errorf("file stores: %+v %+v, %d jobs", mem, led, len(r.Jobs))
		}
		return
	}
	if mem.ValueFrom == nil || led.ValueFrom == nil || *mem.ValueFrom.SecretKeyRef != *led.ValueFrom.SecretKeyRef {
		t.Fatalf("memory store %+v and ledger %+v must read one Secret key", mem, led)
	}
	ref := mem.ValueFrom.SecretKeyRef
	if len(r.Jobs) != 1 {
		t.Fatalf("%d migration Jobs", len(r.Jobs))
	}
	job := r.Jobs[0]
	hook := r.Hooks["Job/"+job.Name]
	if hook == nil || job.Annotations["helm.sh/hook"] != "pre-install,pre-upgrade" ||
		!strings.Contains(job.Annotations["helm.sh/hook-delete-policy"], "before-hook-creation") {
		t.Errorf("the migration Job is not a pre-install,pre-upgrade hook: %v", job.Annotations)
	}
	jc := job.Spec.Template.Spec.Containers[0]
	if strings.Join(append(jc.Command, jc.Args...), " ") != "/ctxproxy migrate" || jc.Image != c.Image {
		t.Errorf("job runs %s %v on %s", jc.Command, jc.Args, jc.Image)
	}
	jenv := envOf(&jc)
	if *jenv["CTXPROXY_MEMORY_STORE"].ValueFrom.SecretKeyRef != *ref || *jenv["CTXPROXY_LEDGER"].ValueFrom.SecretKeyRef != *ref {
		t.Errorf("the Job reads other stores than the pods: %+v", jc.Env)
	}
	if jsc := jc.SecurityContext; jsc == nil || !*jsc.ReadOnlyRootFilesystem || job.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("job pod: %+v", job.Spec.Template.Spec)
	}
	s := r.secret(ref.Name)
	if !chartSecret {
		if s != nil {
			t.Errorf("the chart renders Secret %s that should exist already", ref.Name)
		}
		return
	}
	sh := r.Hooks["Secret/"+ref.Name]
	if s == nil || sh == nil || sh.Weight >= hook.Weight || len(s.Data[ref.Key]) == 0 {
		t.Errorf("the Job's Secret must be a hook of lower weight (exists before the Job on a first install): %+v, hook %+v", s, sh)
	}
}

// checkNoSecretInPlainSight: no Secret value in a ConfigMap or an env literal.
func checkNoSecretInPlainSight(t *testing.T, r *rendered) {
	t.Helper()
	secrets := []string{"ci-password"}
	for _, s := range r.Secrets {
		for _, v := range s.Data {
			secrets = append(secrets, string(v))
		}
		for _, v := range s.StringData {
			secrets = append(secrets, v)
		}
	}
	var plain []string
	for _, cm := range r.ConfigMaps {
		for _, v := range cm.Data {
			plain = append(plain, v)
		}
	}
	for _, d := range r.Deployments {
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			plain = append(plain, e.Value)
		}
	}
	for _, j := range r.Jobs {
		for _, e := range j.Spec.Template.Spec.Containers[0].Env {
			plain = append(plain, e.Value)
		}
	}
	plain = append(plain, r.Notes)
	for _, s := range secrets {
		for _, p := range plain {
			if s != "" && strings.Contains(p, s) {
				t.Errorf("a Secret value is in plain sight: %.40q…", p)
			}
		}
	}
}

func TestChartRefusesValuesNoPodCouldRunWith(t *testing.T) {
	cases := []struct {
		name string
		sets []string
		want string
	}{
		{"2 replicas without PostgreSQL", []string{"replicaCount=2"}, "replicaCount 2 needs PostgreSQL (postgres.dsn or postgres.existingSecret)"},
		{"autoscaling without PostgreSQL", []string{"replicaCount=1", "autoscaling.enabled=true"}, "autoscaling.enabled needs PostgreSQL"},
		{"both a DSN and an existing Secret", []string{"postgres.dsn=postgres://a@b/c", "postgres.existingSecret=db"}, "set postgres.dsn or postgres.existingSecret, not both"},
		{"a wrong type", []string{"replicaCount=1", "requireKnownTenant=maybe"}, "at '/requireKnownTenant': got string, want boolean"},
		{"a wrong type in a nested value", []string{"replicaCount=1", "service.port=http"}, "at '/service/port': got string, want integer"},
		{"an unknown top-level key", []string{"replicaCount=1", "replicas=3"}, "additional properties 'replicas' not allowed"},
		{"a grace period the pod spec cannot follow", []string{"replicaCount=1", "shutdownGrace=1h"}, "at '/shutdownGrace': '1h' does not match pattern"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, chartDir, nil, tc.sets...)
			if err == nil {
				t.Fatal("rendered")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not name %q:\n%v", tc.want, err)
			}
		})
	}
}

func TestChartPolicies(t *testing.T) {
	t.Run("policies become files of a ConfigMap", func(t *testing.T) {
		r, err := render(t, chartDir, []string{ciValues("replicas-existing-secret-values.yaml")})
		if err != nil {
			t.Fatal(err)
		}
		cm := r.configMap("ctxproxy-policies")
		if cm == nil {
			t.Fatal("no policies ConfigMap")
		}
		if _, ok := cm.Data["default.yaml"]; ok {
			t.Error("default.yaml: null did not remove the default tenant")
		}
		if !strings.Contains(cm.Data["acme.yaml"], "mode: enforce") {
			t.Errorf("acme.yaml: %q", cm.Data["acme.yaml"])
		}
		if len(cm.Data) != 1 {
			t.Errorf("ConfigMap files %v, want acme.yaml only", keys(cm.Data))
		}
	})
	t.Run("an existing ConfigMap is mounted instead", func(t *testing.T) {
		r, err := render(t, chartDir, []string{ciValues("default-values.yaml")}, "existingPoliciesConfigMap=my-policies")
		if err != nil {
			t.Fatal(err)
		}
		if len(r.ConfigMaps) != 0 {
			t.Errorf("%d ConfigMaps rendered", len(r.ConfigMaps))
		}
		d, _ := r.deployment(t)
		if v := d.Spec.Template.Spec.Volumes[0]; v.Name != "policies" || v.ConfigMap.Name != "my-policies" {
			t.Errorf("volume %+v", v)
		}
	})
	t.Run("the pods do not restart on a policy change: no checksum of the ConfigMap", func(t *testing.T) {
		a, err := render(t, chartDir, []string{ciValues("default-values.yaml")})
		if err != nil {
			t.Fatal(err)
		}
		b, err := render(t, chartDir, []string{ciValues("default-values.yaml")}, "policies.default\\.yaml=tenant: default")
		if err != nil {
			t.Fatal(err)
		}
		da, _ := a.deployment(t)
		db, _ := b.deployment(t)
		ya, _ := yaml.Marshal(da.Spec.Template)
		yb, _ := yaml.Marshal(db.Spec.Template)
		if string(ya) != string(yb) {
			t.Error("a policy change changes the pod template, so it would restart the pods")
		}
	})
}

func TestChartGrafanaDashboard(t *testing.T) {
	t.Run("renders nothing while the chart has no dashboard", func(t *testing.T) {
		dir := copyChart(t)
		dashes, _ := filepath.Glob(filepath.Join(dir, "dashboards", "*.json"))
		for _, p := range dashes {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
		r, err := render(t, dir, []string{ciValues("autoscaling-servicemonitor-values.yaml")})
		if err != nil {
			t.Fatal(err)
		}
		if cm := r.configMap("ctxproxy-dashboards"); cm != nil {
			t.Errorf("a dashboard ConfigMap with no dashboard: %v", cm.Data)
		}
	})
	t.Run("carries each dashboard file for Grafana's sidecar", func(t *testing.T) {
		dir := copyChart(t)
		dash := `{"title":"ctxproxy test","panels":[]}`
		if err := os.WriteFile(filepath.Join(dir, "dashboards", "ctxproxy-test.json"), []byte(dash), 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := render(t, dir, []string{ciValues("autoscaling-servicemonitor-values.yaml")})
		if err != nil {
			t.Fatal(err)
		}
		cm := r.configMap("ctxproxy-dashboards")
		if cm == nil || cm.Data["ctxproxy-test.json"] != dash || cm.Labels["grafana_dashboard"] != "1" {
			t.Fatalf("dashboard ConfigMap: %+v", cm)
		}
		r, err = render(t, dir, []string{ciValues("default-values.yaml")})
		if err != nil {
			t.Fatal(err)
		}
		if r.configMap("ctxproxy-dashboards") != nil {
			t.Error("rendered with grafanaDashboard.enabled false")
		}
	})
	t.Run("ships each of deploy/grafana's dashboards as it is", func(t *testing.T) {
		src, _ := filepath.Glob("../grafana/dashboards/*.json")
		if len(src) == 0 {
			t.Skip("no dashboard in deploy/grafana/dashboards")
		}
		r, err := render(t, chartDir, []string{ciValues("autoscaling-servicemonitor-values.yaml")})
		if err != nil {
			t.Fatal(err)
		}
		cm := r.configMap("ctxproxy-dashboards")
		if cm == nil {
			t.Fatal("no dashboard ConfigMap")
		}
		for _, p := range src {
			want, _ := os.ReadFile(p)
			if cm.Data[filepath.Base(p)] != string(want) {
				t.Errorf("%s is not in the chart as it is: link it from the chart's dashboards/ (ln -s ../../../grafana/dashboards/%s)", p, filepath.Base(p))
			}
		}
	})
}

// secretEnv resolves a container's env against rendered Secrets and given ones (existing Secrets a
// cluster would hold), as the kubelet does; a reference to a missing Secret fails the test.
func secretEnv(t *testing.T, r *rendered, existing map[string]map[string]string, c *corev1.Container) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			out[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if s := r.secret(ref.Name); s != nil {
				v, ok := s.Data[ref.Key]
				if !ok {
					v = []byte(s.StringData[ref.Key])
				}
				out[e.Name] = string(v)
			} else if v, ok := existing[ref.Name][ref.Key]; ok {
				out[e.Name] = v
			} else {
				t.Fatalf("%s reads Secret %s key %s, which does not exist", e.Name, ref.Name, ref.Key)
			}
		default:
			t.Fatalf("%s: unsupported valueFrom %+v", e.Name, e.ValueFrom)
		}
	}
	return out
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A tenant with its own Anthropic key runs on the chart: api_key_env through extraEnv (from a
// Secret), api_key_file through extraVolumes and extraVolumeMounts.
func TestChartTakesExtraEnvAndVolumes(t *testing.T) {
	r, err := render(t, chartDir, []string{writeValues(t, map[string]any{
		"extraEnv": []any{map[string]any{"name": "ACME_ANTHROPIC_KEY",
			"valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": "acme-key", "key": "key"}}}},
		"extraVolumes":      []any{map[string]any{"name": "globex-key", "secret": map[string]any{"secretName": "globex-key"}}},
		"extraVolumeMounts": []any{map[string]any{"name": "globex-key", "mountPath": "/keys/globex", "readOnly": true}},
	})})
	if err != nil {
		t.Fatal(err)
	}
	d, c := r.deployment(t)
	env := false
	for _, e := range c.Env {
		env = env || e.Name == "ACME_ANTHROPIC_KEY" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "acme-key"
	}
	if !env {
		t.Errorf("extraEnv is not in the container's env: %+v", c.Env)
	}
	vol := false
	for _, v := range d.Spec.Template.Spec.Volumes {
		vol = vol || v.Name == "globex-key" && v.Secret != nil && v.Secret.SecretName == "globex-key"
	}
	mount, policies := false, false
	for _, m := range c.VolumeMounts {
		mount = mount || m.Name == "globex-key" && m.MountPath == "/keys/globex" && m.ReadOnly
		policies = policies || m.Name == "policies" && m.MountPath == "/policies"
	}
	if !vol || !mount || !policies {
		t.Errorf("extraVolumes / extraVolumeMounts not rendered beside the chart's own: %+v %+v", d.Spec.Template.Spec.Volumes, c.VolumeMounts)
	}
}
