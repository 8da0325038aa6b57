package helm_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	corev1 "k8s.io/api/core/v1"

	"github.com/ctxproxy/ctxproxy/internal/binaries"
	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/internal/kubevolume"
	"github.com/ctxproxy/ctxproxy/internal/pgtest"
	"github.com/ctxproxy/ctxproxy/internal/stack"
)

// imageBinary is where the Dockerfile puts ctxproxy in the image.
const imageBinary = "/ctxproxy"

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// ctxproxyBinary builds cmd/ctxproxy with the repository's own go.mod (in its
// root), as the Dockerfile does, not with this module's dependency versions.
func ctxproxyBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "ctxproxy-helm-test"); buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "ctxproxy")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/ctxproxy")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/ctxproxy: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

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
	cmd := exec.Command(ctxproxyBinary(t), append(append([]string{}, c.Command[1:]...), c.Args...)...)
	cmd.Env = list
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

func acmePolicy(trigger int) string {
	return stack.TenantPolicy("acme", chartKey, fmt.Sprintf(
		"context_management:\n  mode: enforce\n  clear_tool_uses:\n    trigger: { type: input_tokens, value: %d }\nmemory:\n  mode: proxy\n", trigger))
}

// The chart's configuration is the one that runs: the rendered migration Job's command, then the
// rendered Deployment's command, args and env, with its mounts, against PostgreSQL and the fake
// upstream; then a ConfigMap update reaches the running process.
func TestChartConfigurationRunsTheBinary(t *testing.T) {
	db := pgtest.New(t, "helm_chart_test")
	fake := fakeapi.New()
	up := httptest.NewServer(fake)
	defer up.Close()
	values := func(trigger int) map[string]any {
		return map[string]any{
			"replicaCount": 3, "upstream": up.URL, "requireKnownTenant": true, "logLevel": "debug",
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

	t.Run("the migration Job migrates", func(t *testing.T) {
		jc := &r.Jobs[0].Spec.Template.Spec.Containers[0]
		out, err := p.command(t, jc, nil).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "schema memory at version") || !strings.Contains(string(out), "schema ledger at version") {
			t.Fatalf("%v\n%s", err, out)
		}
		if n := db.QueryInt(t, `SELECT count(*) FROM ctxproxy_memory_migrations`) * db.QueryInt(t, `SELECT count(*) FROM ctxproxy_ledger_migrations`); n == 0 {
			t.Fatal("no schema after the Job")
		}
	})

	cmd := p.command(t, c, map[string]string{"CTXPROXY_LISTEN": "127.0.0.1:0"})
	proc, err := binaries.Start(context.Background(), cmd, "ctxproxy listening", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Kill()
	base := "http://" + proc.Addr

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
			req, _ := fake.LastRequest("/v1/messages")
			if gjson.GetBytes(req.Body, "context_management.edits.0.trigger.value").Int() == 42345 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the update never reached the process; its log:\n%s", proc.Log())
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	t.Run("SIGTERM ends it cleanly", func(t *testing.T) {
		if code := proc.Stop(); code != 0 {
			t.Errorf("exit %d\n%s", code, proc.Log())
		}
	})
}

func checkTrigger(t *testing.T, fake *fakeapi.API, want int64) {
	t.Helper()
	req, ok := fake.LastRequest("/v1/messages")
	if !ok {
		t.Fatal("nothing reached the upstream")
	}
	edit := gjson.GetBytes(req.Body, "context_management.edits.0")
	if edit.Get("type").Str != "clear_tool_uses_20250919" || edit.Get("trigger.value").Int() != want {
		t.Errorf("upstream body has edits %s, want the tenant's clear_tool_uses at %d", gjson.GetBytes(req.Body, "context_management"), want)
	}
	if !strings.Contains(req.Header.Get("anthropic-beta"), "context-management-2025-06-27") {
		t.Errorf("anthropic-beta %q", req.Header.Get("anthropic-beta"))
	}
	if !strings.Contains(gjson.GetBytes(req.Body, "tools").Raw, `"memory_20250818"`) {
		t.Errorf("no memory tool: %s", gjson.GetBytes(req.Body, "tools").Raw)
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
	help, _ := exec.Command(ctxproxyBinary(t), "--help").CombinedOutput()
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`\(env (CTXPROXY_[A-Z_]+)\)`).FindAllStringSubmatch(string(help), -1) {
		known[m[1]] = true
	}
	if len(known) < 10 {
		t.Fatalf("--help lists %d variables:\n%s", len(known), help)
	}
	for _, values := range []string{"default-values.yaml", "replicas-existing-secret-values.yaml", "autoscaling-servicemonitor-values.yaml"} {
		r, err := render(t, chartDir, []string{ciValues(values)}, "prices=/policies/prices.yaml", "debugAddr=127.0.0.1:6060")
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
				if !known[e.Name] {
					t.Errorf("%s: %s sets %s, which ctxproxy does not read", values, ct.Name, e.Name)
				}
			}
			if out, err := exec.Command(ctxproxyBinary(t), append(ct.Args, "--help")...).CombinedOutput(); err != nil {
				t.Errorf("%s: ctxproxy %v: %v\n%s", values, ct.Args, err, out)
			}
		}
	}
}

// One pod without PostgreSQL: the file store and the file ledger land in the /data emptyDir the
// chart mounts (the root filesystem is read-only).
func TestChartOnFilesRunsTheBinary(t *testing.T) {
	fake := fakeapi.New()
	up := httptest.NewServer(fake)
	defer up.Close()
	r, err := render(t, chartDir, nil, "replicaCount=1", "upstream="+up.URL)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Jobs) != 0 {
		t.Fatal("a migration Job without PostgreSQL")
	}
	d, c := r.deployment(t)
	p := materialise(t, r, d.Spec.Template.Spec, t.TempDir())
	proc, err := binaries.Start(context.Background(), p.command(t, c, map[string]string{"CTXPROXY_LISTEN": "127.0.0.1:0"}), "ctxproxy listening", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Kill()
	if code, body := get(t, "http://"+proc.Addr+c.ReadinessProbe.HTTPGet.Path); code != 200 {
		t.Fatalf("readiness: %d %s", code, body)
	}
	if code, body := post(t, "http://"+proc.Addr, "sk-ant-anyone"); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	if code := proc.Stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, proc.Log())
	}
	if b, err := os.ReadFile(filepath.Join(p.root, "data", "ledger.jsonl")); err != nil || !strings.Contains(string(b), `"tenant":"default"`) {
		t.Errorf("ledger in the /data volume: %q, %v", b, err)
	}
}
