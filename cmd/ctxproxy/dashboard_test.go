package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/binaries"
	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/internal/testwait"
	"github.com/ctxproxy/ctxproxy/stack"
)

// dashboardExprs reads every PromQL expression of the shipped Grafana
// dashboard, by panel title.
func dashboardExprs(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("../../deploy/grafana/dashboards/ctxproxy.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	out := map[string][]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out[p.Title] = append(out[p.Title], tg.Expr)
		}
	}
	if len(out) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return out
}

// grafanaVars replaces Grafana's template variables by what Grafana puts in
// their place, so the query is what Prometheus would receive.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__range", "6h", "$__interval", "15s", "$tenant", ".*")

// TestDashboard holds deploy/grafana/dashboards/ctxproxy.json to the code:
// every query parses, and every metric it reads has a series in a real
// binary's /metrics after one ordinary request per tenant, so a renamed
// metric cannot leave a dead panel.
func TestDashboard(t *testing.T) {
	names := map[string][]string{} // metric → panels reading it
	p := parser.NewParser(parser.Options{})
	for title, exprs := range dashboardExprs(t) {
		for _, e := range exprs {
			expr, err := p.ParseExpr(grafanaVars.Replace(e))
			if err != nil {
				t.Errorf("panel %q: %v\n%s", title, err, e)
				continue
			}
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok {
					names[vs.Name] = append(names[vs.Name], title)
				}
				return nil
			})
		}
	}
	if t.Failed() {
		return
	}

	fake, upURL := fakeUpstream(t)
	fake.SetResponder(fakeapi.Script(fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("hi")}, Usage: &fakeapi.Usage{InputTokens: 10, OutputTokens: 2}}))
	// Tenants: acme (edits, memory), capped (spend caps), lab (the policy lab), default.
	const cappedKey, labKey = "sk-ant-dashboard-capped", "sk-ant-dashboard-lab"
	pols, _, err := stack.Layout(t.TempDir(), map[string]string{
		"default.yaml": "tenant: default\nmemory:\n  mode: off\n",
		"acme.yaml": stack.TenantPolicy("acme", binKey,
			"context_management:\n  mode: enforce\n  clear_tool_uses:\n    trigger: { type: input_tokens, value: 30000 }\nmemory:\n  mode: proxy\n"),
		"capped.yaml": stack.TenantPolicy("capped", cappedKey, "limits:\n  spend: [{period: daily, usd: 5}, {period: monthly, usd: 100}]\n"),
		"lab.yaml": stack.TenantPolicy("lab", labKey,
			"shadow:\n  sample: 0.01\n  candidates:\n    - name: no-edits\n      context_management: { mode: off }\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, "--upstream", upURL, "--policies", pols, "--memory-dir", t.TempDir(),
		"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"), "--debug-addr", "127.0.0.1:0")
	post := func(key, body string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+proxy.Addr+"/v1/messages", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		req.Header.Set("Anthropic-Beta", fakeapi.BetaThinkingBinding)
		req.Header.Set("X-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("request as %q: status %d %s", key, resp.StatusCode, b)
		}
		return string(b)
	}
	// One ordinary request per tenant, each by its key (default by a key no tenant lists).
	for _, key := range []string{binKey, cappedKey, labKey, "sk-ant-dashboard-no-tenant"} {
		post(key, `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	}
	panelEvents(t, proxy, fake, post)
	exposed := debugMetrics(t, proxy)
	series := map[string]bool{}
	for _, line := range strings.Split(exposed, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		series[strings.FieldsFunc(line, func(r rune) bool { return r == '{' || r == ' ' })[0]] = true
	}
	var sorted []string
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		t.Run(n+" has a series", func(t *testing.T) {
			if !series[n] {
				t.Errorf("no series of %s in /metrics (panels %q)", n, names[n])
			}
		})
	}
}

// panelEvents makes what the event-only panels count happen once: acme uses
// a model the API lists as deprecated (the models are read again, as every
// ten minutes), and sends back a thinking block whose conversation changed
// under drop_block, which the API drops and reports in input_transformations.
func panelEvents(t *testing.T, proxy *binaries.Process, fake *fakeapi.API, post func(key, body string) string) {
	t.Helper()
	refresh := func() {
		resp, err := http.Post("http://"+proxy.Addrs["debug listening"]+"/debug/models/refresh", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("models refresh: status %d", resp.StatusCode)
		}
	}
	refresh() // acme's models are known by its credential now
	post(binKey, `{"model":"claude-opus-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	refresh()

	fake.SetResponder(fakeapi.Script(fakeapi.Reply{Content: []json.RawMessage{fakeapi.Thinking("Plan.", "sig_plan"), fakeapi.Text("Hi.")}}))
	thinking := func(mode string) string {
		return `"thinking":{"type":"enabled","budget_tokens":1024,"block_binding":{"prefix_mismatch_behavior":"` + mode + `"}}`
	}
	first := post(binKey, `{"model":"claude-opus-4-8","max_tokens":2000,`+thinking("error")+`,"messages":[{"role":"user","content":"hi"}]}`)
	content := gjson.Get(first, "content").Raw
	post(binKey, `{"model":"claude-opus-4-8","max_tokens":2000,`+thinking("drop_block")+`,"messages":[{"role":"user","content":"hello"},{"role":"assistant","content":`+content+`},{"role":"user","content":"go on"}]}`)
	// The count is made as the call is accounted, which may end after the reply.
	testwait.Eventually(t, "the dropped thinking block counted", func() {
		for !strings.Contains(debugMetrics(t, proxy), "ctxproxy_input_transformations_total{") {
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// debugMetrics is /metrics on the debug listener.
func debugMetrics(t *testing.T, proxy *binaries.Process) string {
	t.Helper()
	resp, err := http.Get("http://" + proxy.Addrs["debug listening"] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Every panel reads the dashboard's datasource variable (a Prometheus
// datasource the viewer picks, so the dashboard imports into any Grafana),
// the compose file provisions Prometheus as the default datasource the
// variable starts on, and mounts the provisioning and dashboard folders
// where Grafana reads them.
func TestDashboardProvisioning(t *testing.T) {
	ds, err := os.ReadFile("../../deploy/grafana/provisioning/datasources/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ds), "type: prometheus") || !strings.Contains(string(ds), "isDefault: true") {
		t.Errorf("the provisioned Prometheus is not the default datasource:\n%s", ds)
	}
	b, _ := os.ReadFile("../../deploy/grafana/dashboards/ctxproxy.json")
	var d struct {
		Templating struct {
			List []struct {
				Name, Type string
				Query      json.RawMessage
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title      string `json:"title"`
			Type       string `json:"type"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	variable := false
	for _, v := range d.Templating.List {
		variable = variable || v.Name == "datasource" && v.Type == "datasource" && string(v.Query) == `"prometheus"`
	}
	if !variable {
		t.Error("the dashboard has no datasource variable of Prometheus datasources")
	}
	if strings.Contains(string(b), `"uid": "prometheus"`) {
		t.Error("the dashboard names a datasource by its uid, not by the variable")
	}
	for _, p := range d.Panels {
		if p.Type != "row" && p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q reads datasource %q", p.Title, p.Datasource.UID)
		}
	}
	compose, _ := os.ReadFile("../../docker-compose.yml")
	for _, mount := range []string{"./deploy/grafana/provisioning:/etc/grafana/provisioning", "./deploy/grafana/dashboards:/var/lib/grafana/dashboards"} {
		if !strings.Contains(string(compose), mount) {
			t.Errorf("docker-compose.yml does not mount %s", mount)
		}
	}
}
