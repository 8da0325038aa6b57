package helm_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// composeInterpolate does compose's ${VAR:-default} with VAR unset, the way
// a fresh checkout runs it.
var composeVar = regexp.MustCompile(`\$\{[A-Z_]+:-([^}]*)\}`)

// docker-compose.yml and the chart start the binary with the same configuration: the image's
// entrypoint, the same args, the same variables with the same values (the DSN read from the
// chart's Secret; the DSN's and the trace collector's host are the only values given), and /admin
// off in both until the operator sets a token.
func TestComposeAndChartStartTheBinaryAlike(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Command     []string          `json:"command"`
			Environment map[string]string `json:"environment"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	svc, ok := doc.Services["ctxproxy-1"]
	if !ok {
		t.Fatal("no ctxproxy-1 service")
	}
	compose := map[string]string{}
	for k, v := range svc.Environment {
		if v = composeVar.ReplaceAllString(v, "$1"); v != "" {
			compose[k] = v
		}
	}
	dockerfile, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dockerfile), `ENTRYPOINT ["`+imageBinary+`"]`) {
		t.Fatalf("the image's entrypoint is not %s", imageBinary)
	}

	r, err := render(t, chartDir, nil, "postgres.dsn="+compose["CTXPROXY_MEMORY_STORE"],
		"tracing.otlpEndpoint="+compose["OTEL_EXPORTER_OTLP_ENDPOINT"])
	if err != nil {
		t.Fatal(err)
	}
	_, c := r.deployment(t)
	chart := secretEnv(t, r, nil, c)
	if strings.Join(c.Command, " ") != imageBinary || strings.Join(c.Args, " ") != strings.Join(svc.Command, " ") {
		t.Errorf("chart runs %v %v, compose runs the entrypoint with %v", c.Command, c.Args, svc.Command)
	}
	for k, v := range compose {
		if chart[k] != v {
			t.Errorf("%s: compose %q, chart %q", k, v, chart[k])
		}
	}
	for k, v := range chart {
		if _, ok := compose[k]; !ok {
			t.Errorf("%s=%q is set by the chart only", k, v)
		}
	}
}
