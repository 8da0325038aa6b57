package helm_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctxproxy/ctxproxy/deploy/internal/kubevolume"
)

// imageBinary is where the Dockerfile puts ctxproxy in the image.
const imageBinary = "/ctxproxy"

// pod is a rendered pod spec made real on this machine: each volume mount is
// a folder under root at the path it names (ConfigMaps written as the kubelet
// writes them), each Secret reference resolved, the image's binary replaced
// by the built one. Nothing else is changed, but the listen address (a test
// cannot bind the chart's fixed port).
type pod struct {
	root     string
	rendered *rendered
	spec     corev1.PodSpec
}

// materialise creates the volumes of spec's first container under root.
func materialise(t *testing.T, r *rendered, spec corev1.PodSpec, root string) *pod {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	for _, m := range spec.Containers[0].VolumeMounts {
		v, ok := vols[m.Name]
		dir := filepath.Join(root, m.MountPath)
		switch {
		case !ok:
			t.Fatalf("mount %s names no volume", m.Name)
		case v.ConfigMap != nil:
			cm := r.configMap(v.ConfigMap.Name)
			if cm == nil {
				t.Fatalf("volume %s: ConfigMap %s is not rendered", m.Name, v.ConfigMap.Name)
			}
			if err := kubevolume.Write(dir, cm.Data); err != nil {
				t.Fatal(err)
			}
		case v.EmptyDir != nil:
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("volume %s: unsupported source", m.Name)
		}
	}
	return &pod{root: root, rendered: r, spec: spec}
}

// command is container c of the pod as a process: its command and args, its
// env resolved, paths under a mount moved under root.
func (p *pod) command(t *testing.T, c *corev1.Container, overrides map[string]string) *exec.Cmd {
	t.Helper()
	if len(c.Command) == 0 || c.Command[0] != imageBinary {
		t.Fatalf("container %s runs %v, not the image's %s", c.Name, c.Command, imageBinary)
	}
	env := secretEnv(t, p.rendered, nil, c)
	for k, v := range overrides {
		env[k] = v
	}
	var mounts []string
	for _, m := range p.spec.Containers[0].VolumeMounts {
		mounts = append(mounts, m.MountPath)
	}
	list := []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		list = append(list, k+"="+p.underRoot(v, mounts))
	}
	sort.Strings(list)
	cmd := exec.Command(binary(t, "ctxproxy"), append(append([]string{}, c.Command[1:]...), c.Args...)...)
	cmd.Env = list
	cmd.Dir = p.root // the image's working directory is /: a relative default path lands in the pod
	return cmd
}

// underRoot moves a path value ("/policies", "/data/x", "file:/data/x") that
// lies in a mount under root; other values stay as they are.
func (p *pod) underRoot(v string, mounts []string) string {
	scheme, path := "", v
	if rest, ok := strings.CutPrefix(v, "file:"); ok {
		scheme, path = "file:", rest
	}
	for _, m := range mounts {
		if path == m || strings.HasPrefix(path, m+"/") {
			return scheme + filepath.Join(p.root, path)
		}
	}
	return v
}

const chartKey = "sk-ant-helm-chart-test"

// onLoopback moves the pod's listeners to ephemeral loopback ports: a test
// cannot bind the chart's fixed ones.
var onLoopback = map[string]string{"CTXPROXY_LISTEN": "127.0.0.1:0", "CTXPROXY_METRICS_ADDR": "127.0.0.1:0"}

// containerPort is the number of c's port called name (0: none).
func containerPort(c *corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func acmePolicy(trigger int) string {
	return fmt.Sprintf("tenant: acme\napi_keys_sha256: [%q]\n", keyHash(chartKey)) + fmt.Sprintf(
		"context_management:\n  mode: enforce\n  clear_tool_uses:\n    trigger: { type: input_tokens, value: %d }\nmemory:\n  mode: proxy\n", trigger)
}

// The chart's configuration is the one that runs: the rendered migration Job's command, then the
// rendered Deployment's command, args and env, with its mounts, against PostgreSQL and the fake
// upstream; then a ConfigMap update reaches the running process.
func TestChartConfigurationRunsTheBinary(t *testing.T) {
	db := newTestDB(t)
	fake := startFake(t)
	values := func(trigger int) map[string]any {
		return map[string]any{
			"replicaCount": 3, "upstream": fake.url, "requireKnownTenant": true, "logLevel": "debug",
			"postgres": map[string]any{"dsn": db.URL},
			"policies": map[string]any{"default.yaml": nil, "acme.yaml": acmePolicy(30000 + trigger)},
		}
	}
	r, err := render(t, chartDir, []string{writeValues(t, values(0))})
	if err != nil {
		t.Fatal(err)
	}
	d, c := r.deployment(t)
	p := materialise(t, r, d.Spec.Template.Spec, t.TempDir())
	if got := envOf(c)["CTXPROXY_LISTEN"].Value; got != fmt.Sprintf("0.0.0.0:%d", c.Ports[0].ContainerPort) {
		t.Fatalf("CTXPROXY_LISTEN %s is not the container port %d the probes and the Service use", got, c.Ports[0].ContainerPort)
	}
	if got, port := envOf(c)["CTXPROXY_METRICS_ADDR"].Value, containerPort(c, "metrics"); got != fmt.Sprintf("0.0.0.0:%d", port) {
		t.Fatalf("CTXPROXY_METRICS_ADDR %s is not the metrics container port %d the ServiceMonitor scrapes", got, port)
	}

	t.Run("the migration Job migrates", func(t *testing.T) {
		jc := &r.Jobs[0].Spec.Template.Spec.Containers[0]
		out, err := p.command(t, jc, nil).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "schema memory at version") || !strings.Contains(string(out), "schema ledger at version") {
			t.Fatalf("%v\n%s", err, out)
		}
		if db.tables(t, "ctxproxy_memory_migrations") != 1 || db.tables(t, "ctxproxy_ledger_migrations") != 1 {
			t.Fatal("no schema after the Job")
		}
	})

	proc := start(t, p.command(t, c, onLoopback), "ctxproxy listening")
	base := "http://" + proc.Addr

	t.Run("/metrics is served on the metrics port, not the agents'", func(t *testing.T) {
		if code, body := get(t, "http://"+proc.Addrs["metrics listening"]+"/metrics"); code != 200 || !strings.Contains(body, `tenant="acme"`) {
			t.Errorf("metrics port: %d %.300s", code, body)
		}
		if code, body := get(t, base+"/metrics"); code != 404 || strings.Contains(body, "acme") {
			t.Errorf("the agents' port answers /metrics: %d %.300s", code, body)
		}
	})
	t.Run("the probes answer", func(t *testing.T) {
		for _, probe := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
			if code, body := get(t, base+probe.HTTPGet.Path); code != 200 {
				t.Errorf("%s: %d %s", probe.HTTPGet.Path, code, body)
			}
		}
	})
	t.Run("a request gets the tenant's policy from the ConfigMap", func(t *testing.T) {
		if code, body := post(t, base, chartKey); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		checkTrigger(t, fake, 30000)
	})
	t.Run("requireKnownTenant refuses an unknown key", func(t *testing.T) {
		if code, body := post(t, base, "sk-ant-nobody"); code != 401 || !strings.Contains(body, "authentication_error") {
			t.Errorf("%d %s", code, body)
		}
	})
	t.Run("a ConfigMap update reaches the running process", func(t *testing.T) {
		r2, err := render(t, chartDir, []string{writeValues(t, values(12345))})
		if err != nil {
			t.Fatal(err)
		}
		if err := kubevolume.Write(filepath.Join(p.root, "policies"), r2.configMap("ctxproxy-policies").Data); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second) // a hang guard, not the assertion
		for {
			if code, body := post(t, base, chartKey); code != 200 {
				t.Fatalf("%d %s", code, body)
			}
			if triggerOf(t, fake.lastMessages(t)) == 42345 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the update never reached the process; its log:\n%s", proc.Log())
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	t.Run("SIGTERM ends it cleanly", func(t *testing.T) {
		if code := proc.stop(); code != 0 {
			t.Errorf("exit %d\n%s", code, proc.Log())
		}
	})
}

// upstreamBody is the part of a request body the tests read.
type upstreamBody struct {
	ContextManagement struct {
		Edits []struct {
			Type    string `json:"type"`
			Trigger struct {
				Value int64 `json:"value"`
			} `json:"trigger"`
		} `json:"edits"`
	} `json:"context_management"`
	Tools []struct {
		Type string `json:"type"`
	} `json:"tools"`
}

func triggerOf(t *testing.T, req fakeRequest) int64 {
	t.Helper()
	var b upstreamBody
	if err := json.Unmarshal(req.Body, &b); err != nil {
		t.Fatal(err)
	}
	if len(b.ContextManagement.Edits) == 0 {
		return 0
	}
	return b.ContextManagement.Edits[0].Trigger.Value
}

func checkTrigger(t *testing.T, fake *fakeUpstream, want int64) {
	t.Helper()
	req := fake.lastMessages(t)
	var b upstreamBody
	if err := json.Unmarshal(req.Body, &b); err != nil {
		t.Fatal(err)
	}
	if e := b.ContextManagement.Edits; len(e) != 1 || e[0].Type != "clear_tool_uses_20250919" || e[0].Trigger.Value != want {
		t.Errorf("upstream body has edits %+v, want the tenant's clear_tool_uses at %d", e, want)
	}
	if !strings.Contains(req.Header.Get("anthropic-beta"), "context-management-2025-06-27") {
		t.Errorf("anthropic-beta %q", req.Header.Get("anthropic-beta"))
	}
	if len(b.Tools) != 1 || b.Tools[0].Type != "memory_20250818" {
		t.Errorf("tools %+v, want the memory tool", b.Tools)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func post(t *testing.T, base, key string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages",
		strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Api-Key", key)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Every CTXPROXY_* variable the chart sets is one the binary reads (a typo would be ignored
// silently), and the Job's subcommand exists.
func TestChartSetsOnlyTheBinarysVariables(t *testing.T) {
	help, _ := exec.Command(binary(t, "ctxproxy"), "--help").CombinedOutput()
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`\(env (CTXPROXY_[A-Z_]+)\)`).FindAllStringSubmatch(string(help), -1) {
		known[m[1]] = true
	}
	if len(known) < 10 {
		t.Fatalf("--help lists %d variables:\n%s", len(known), help)
	}
	set := map[string]bool{}
	for _, values := range []string{"default-values.yaml", "replicas-existing-secret-values.yaml", "autoscaling-servicemonitor-values.yaml"} {
		r, err := render(t, chartDir, []string{ciValues(values)}, "prices=/policies/prices.yaml", "debugAddr=127.0.0.1:6060", "debugPoisonBuffers=true", "debugManualClock=true", "debugNoCacheTracking=true", "trustedProxies=10.0.0.0/8", "adminToken.existingSecret=admin",
			"limitsStore=memory", "ratelimitStore=redis://redis:6379/0")
		if err != nil {
			t.Fatal(err)
		}
		_, c := r.deployment(t)
		containers := []corev1.Container{*c}
		for _, j := range r.Jobs {
			containers = append(containers, j.Spec.Template.Spec.Containers...)
		}
		for _, ct := range containers {
			for _, e := range ct.Env {
				set[e.Name] = true
				if strings.HasPrefix(e.Name, "CTXPROXY_") && !known[e.Name] {
					t.Errorf("%s: %s sets %s, which ctxproxy does not read", values, ct.Name, e.Name)
				}
			}
			if out, err := exec.Command(binary(t, "ctxproxy"), append(ct.Args, "--help")...).CombinedOutput(); err != nil {
				t.Errorf("%s: ctxproxy %v: %v\n%s", values, ct.Args, err, out)
			}
		}
	}
	for name := range known {
		if !set[name] {
			t.Errorf("the chart never sets %s: map it to a value (the chart's values are the binary's variables, one to one)", name)
		}
	}
}

// One pod without PostgreSQL: the file store and the file ledger land in the /data emptyDir the
// chart mounts (the root filesystem is read-only).
func TestChartOnFilesRunsTheBinary(t *testing.T) {
	fake := startFake(t)
	r, err := render(t, chartDir, nil, "replicaCount=1", "upstream="+fake.url)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Jobs) != 0 {
		t.Fatal("a migration Job without PostgreSQL")
	}
	d, c := r.deployment(t)
	p := materialise(t, r, d.Spec.Template.Spec, t.TempDir())
	proc := start(t, p.command(t, c, onLoopback), "ctxproxy listening")
	if code, body := get(t, "http://"+proc.Addr+c.ReadinessProbe.HTTPGet.Path); code != 200 {
		t.Fatalf("readiness: %d %s", code, body)
	}
	if code, body := post(t, "http://"+proc.Addr, "sk-ant-anyone"); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	if code := proc.stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, proc.Log())
	}
	if b, err := os.ReadFile(filepath.Join(p.root, "data", "ledger.jsonl")); err != nil || !strings.Contains(string(b), `"tenant":"default"`) {
		t.Errorf("ledger in the /data volume: %q, %v", b, err)
	}
}
