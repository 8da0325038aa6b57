package proxy

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/policy"
)

// A Config without what New needs is refused with an error that names it: proxy.Config has no
// silent defaults, so a proxy never runs without a body limit or its timeouts.
func TestNewRefusesAConfigWithoutWhatItNeeds(t *testing.T) {
	dir := t.TempDir()
	writePolicies(t, dir, map[string]string{"default.yaml": "tenant: default\ncontext_management:\n  mode: off\nmemory:\n  mode: off\n"})
	pols, err := policy.NewStore(dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	u := &url.URL{Scheme: "http", Host: "127.0.0.1:1"}
	tests := []struct {
		name string
		cfg  Config
		want string // in the error; "" for none
	}{
		{"the zero Config needs an upstream", Config{}, "upstream URL is required"},
		{"an upstream alone needs policies", Config{Upstream: u}, "policies are required"},
		{"without limits all three are named", Config{Upstream: u, Policies: pols},
			"Config.MaxBody, UpstreamTimeout and StreamIdleTimeout are required (server.DefaultSettings has serve's)"},
		{"a missing stream idle timeout is named alone", Config{Upstream: u, Policies: pols, MaxBody: 1 << 20, UpstreamTimeout: time.Minute},
			"Config.StreamIdleTimeout is required"},
		{"a negative body limit is missing", Config{Upstream: u, Policies: pols, MaxBody: -1, UpstreamTimeout: time.Minute, StreamIdleTimeout: time.Minute},
			"Config.MaxBody is required"},
		{"with its limits it is built", withLimits(Config{Upstream: u, Policies: pols}), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := New(tt.cfg)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tt.want == "" && srv == nil:
				t.Fatal("New gave no server and no error")
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("New: %v, want an error with %q", err, tt.want)
			case tt.want != "" && srv != nil:
				t.Fatal("New gave a server with its error")
			}
		})
	}
}
