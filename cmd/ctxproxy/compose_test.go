package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The compose file passes flags and environment to ctxproxy; a typo there
// would only show when someone deploys it.
func TestComposeFilePassesOnlyRealFlagsAndEnv(t *testing.T) {
	data, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Build       any               `yaml:"build"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	flags, envs := map[string]bool{}, map[string]bool{}
	for _, f := range serveFlags {
		flags[f.name], envs[f.env] = true, true
	}
	replicas := 0
	for name, svc := range doc.Services {
		if svc.Build == nil {
			continue // not ctxproxy
		}
		replicas++
		if len(svc.Command) == 0 || svc.Command[0] != "serve" {
			t.Errorf("%s: command %q, want serve first", name, svc.Command)
			continue
		}
		if v := svc.Environment["CTXPROXY_ADMIN_TOKEN"]; v != "" && v != "${CTXPROXY_ADMIN_TOKEN:-}" {
			t.Errorf("%s: CTXPROXY_ADMIN_TOKEN is %q: /admin must stay off until the operator sets a token", name, v)
		}
		for _, arg := range svc.Command[1:] {
			if !strings.HasPrefix(arg, "--") {
				t.Errorf("%s: argument %q is not a --flag=value", name, arg)
				continue
			}
			f, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
			if !flags[f] {
				t.Errorf("%s: flag --%s does not exist", name, f)
			}
		}
		for k := range svc.Environment {
			if strings.HasPrefix(k, "CTXPROXY_") && !envs[k] {
				t.Errorf("%s: environment variable %s does not exist", name, k)
			}
		}
		if _, _, err := parseConfig("ctxproxy", svc.Command[1:], func(k string) string { return svc.Environment[k] }, serveFlags); err != nil {
			t.Errorf("%s: ctxproxy would refuse its command line: %v", name, err)
		}
	}
	if replicas != 2 {
		t.Errorf("compose file runs %d ctxproxy replicas, want 2", replicas)
	}
}

// The image keeps the file memory store and the file ledger on a volume, and
// the build context leaves local state and npm trees out.
func TestDockerImageKeepsStateOnAVolume(t *testing.T) {
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`VOLUME ["/data"]`, "CTXPROXY_MEMORY_DIR=/data/memories", "CTXPROXY_LEDGER=file:/data/ledger.jsonl", "USER nonroot"} {
		if !strings.Contains(string(df), want) {
			t.Errorf("Dockerfile lacks %s", want)
		}
	}
	ign, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(ign), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	for _, want := range []string{".git", "data/", "**/node_modules"} {
		if !lines[want] {
			t.Errorf(".dockerignore lacks %s", want)
		}
	}
}

// deployedValues are the serve settings a container sets apart from the
// binary's defaults, each for a reason of the deployment; every other
// CTXPROXY_* variable that docker-compose.yml or the Dockerfile sets must be
// the default in serveFlags (the Helm chart is held equal to compose in
// deploy/helm), so a default changed in one place cannot drift elsewhere.
var deployedValues = map[string]string{
	"CTXPROXY_LISTEN":       "all interfaces: the port is published",
	"CTXPROXY_POLICIES":     "the policies are mounted at /policies",
	"CTXPROXY_MEMORY_DIR":   "state lives on the /data volume",
	"CTXPROXY_MEMORY_AUDIT": "state lives on the /data volume",
	"CTXPROXY_LEDGER":       "state lives on the /data volume, or in PostgreSQL",
	"CTXPROXY_MEMORY_STORE": "the replicas share PostgreSQL",
	"CTXPROXY_METRICS_ADDR": "Prometheus scrapes a port of its own",
}

func TestDeploymentsRestateTheServeDefaults(t *testing.T) {
	defaults := map[string]string{}
	for _, f := range serveFlags {
		defaults[f.env] = f.def
	}
	check := func(where string, env map[string]string) {
		t.Helper()
		n := 0
		for k, v := range env {
			if !strings.HasPrefix(k, "CTXPROXY_") || v == "" || strings.HasPrefix(v, "${") {
				continue
			}
			n++
			if def, ok := defaults[k]; ok && v != def && deployedValues[k] == "" {
				t.Errorf("%s sets %s=%s, but the binary's default is %q: change the default in serveFlags, or say in deployedValues why it differs", where, k, v, def)
			}
		}
		if n == 0 {
			t.Errorf("%s sets no CTXPROXY_* variable: did its format change?", where)
		}
	}
	data, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	check("docker-compose.yml", doc.Services["ctxproxy-1"].Environment)

	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, m := range regexp.MustCompile(`(CTXPROXY_[A-Z_]+)=(\S+)`).FindAllStringSubmatch(string(df), -1) {
		env[m[1]] = strings.Trim(m[2], `"\`)
	}
	check("Dockerfile", env)

	// --help prints the same table.
	_, fs, err := parseConfig("ctxproxy", nil, func(string) string { return "" }, serveFlags)
	if err != nil {
		t.Fatal(err)
	}
	var help strings.Builder
	fs.SetOutput(&help)
	fs.Usage()
	for _, f := range serveFlags {
		if f.def != "" && f.def != "false" && !strings.Contains(help.String(), fmt.Sprintf("(default %q)", f.def)) {
			t.Errorf("--help does not show --%s's default %q", f.name, f.def)
		}
	}
}
