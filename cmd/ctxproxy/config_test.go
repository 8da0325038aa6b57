package main

import (
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/server"
)

func TestParseConfig(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, c *config)
	}{
		{"uses the documented defaults", nil, nil, func(t *testing.T, c *config) {
			if c.Listen != "127.0.0.1:8080" || c.Upstream != "https://api.anthropic.com" || c.Policies != "./policies" ||
				c.MemoryDir != "./data/memories" || c.MaxBody != 32<<20 || c.LogLevel != "info" || c.RequireKnownTenant {
				t.Fatalf("defaults wrong: %+v", c)
			}
		}},
		{"takes every default from server.DefaultSettings, the one place they are written", nil, nil, func(t *testing.T, c *config) {
			d := server.DefaultSettings
			got := c.settings(nil, nil)
			if got.Upstream != d.Upstream || got.Policies != d.Policies || got.MemoryDir != d.MemoryDir ||
				got.MemoryStore != d.MemoryStore || got.MaxBody != d.MaxBody || got.Ledger != d.Ledger ||
				got.UpstreamTimeout != d.UpstreamTimeout || got.StreamIdleTimeout != d.StreamIdleTimeout {
				t.Fatalf("settings from the flags' defaults = %+v, want server.DefaultSettings %+v", got, d)
			}
			if c.Listen != server.DefaultListen || c.LogLevel != server.DefaultLogLevel || c.ShutdownGrace != server.DefaultShutdownGrace {
				t.Fatalf("listen %q, log level %q, shutdown grace %s: not the server package's defaults", c.Listen, c.LogLevel, c.ShutdownGrace)
			}
		}},
		{"reads each flag's environment twin", nil, map[string]string{"CTXPROXY_LISTEN": "127.0.0.1:9", "CTXPROXY_MAX_BODY": "1MiB", "CTXPROXY_REQUIRE_KNOWN_TENANT": "true"}, func(t *testing.T, c *config) {
			if c.Listen != "127.0.0.1:9" || c.MaxBody != 1<<20 || !c.RequireKnownTenant {
				t.Fatalf("env not applied: %+v", c)
			}
		}},
		{"lets a flag win over its environment twin", []string{"--listen", "127.0.0.1:7"}, map[string]string{"CTXPROXY_LISTEN": "127.0.0.1:9"}, func(t *testing.T, c *config) {
			if c.Listen != "127.0.0.1:7" {
				t.Fatalf("listen = %s", c.Listen)
			}
		}},
		{"takes --require-known-tenant bare", []string{"--require-known-tenant", "--listen=127.0.0.1:1"}, nil, func(t *testing.T, c *config) {
			if !c.RequireKnownTenant || c.Listen != "127.0.0.1:1" {
				t.Fatalf("got %+v", c)
			}
		}},
		{"takes --require-known-tenant false", []string{"--require-known-tenant", "false"}, nil, func(t *testing.T, c *config) {
			if c.RequireKnownTenant {
				t.Fatal("want false")
			}
		}},
		{"takes --debug-no-cache-tracking bare, and its environment twin", []string{"--debug-no-cache-tracking"}, nil, func(t *testing.T, c *config) {
			if !c.DebugNoCacheTracking {
				t.Fatal("want true")
			}
			c, _, err := parseConfig("ctxproxy", nil, env(map[string]string{"CTXPROXY_DEBUG_NO_CACHE_TRACKING": "true"}), serveFlags)
			if err != nil || !c.DebugNoCacheTracking {
				t.Fatalf("env: %v %+v", err, c)
			}
		}},
		{"parses durations", []string{"--upstream-timeout=3s", "--shutdown-grace=1m"}, nil, func(t *testing.T, c *config) {
			if c.UpstreamTimeout != 3*time.Second || c.ShutdownGrace != time.Minute {
				t.Fatalf("got %+v", c)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := parseConfig("ctxproxy", tt.args, env(tt.env), serveFlags)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestParseConfigRejectsBadValues(t *testing.T) {
	for _, args := range [][]string{{"--max-body=lots"}, {"--max-body=-1"}, {"--upstream-timeout=soon"}, {"--require-known-tenant=maybe"}, {"--no-such-flag"}} {
		t.Run(args[0], func(t *testing.T) {
			if _, _, err := parseConfig("ctxproxy", args, func(string) string { return "" }, serveFlags); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"32MiB": 32 << 20, "1KiB": 1024, "2MB": 2_000_000, "512": 512, "1GiB": 1 << 30, "10K": 10240} {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}
