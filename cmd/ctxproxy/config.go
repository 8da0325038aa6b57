package main

import (
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/server"
)

// config is the command line; every flag has an environment twin.
type config struct {
	Listen               string
	Upstream             string
	Policies             string
	MemoryDir            string
	MemoryStore          string
	MaxBody              int64
	LogLevel             string
	RequireKnownTenant   bool
	ForwardWhileReading  bool
	Ledger               string
	Prices               string
	AdminToken           string
	AdminTokenFlag       bool // AdminToken came on the command line, where any local user can read it
	MemoryAudit          string
	UpstreamTimeout      time.Duration
	StreamIdleTimeout    time.Duration
	ShutdownGrace        time.Duration
	DebugAddr            string
	MetricsAddr          string
	TrustedProxies       []netip.Prefix
	LimitsStore          string
	RatelimitStore       string
	DebugPoisonBuffers   bool
	DebugManualClock     bool
	DebugNoCacheTracking bool
}

// flagSpec ties a flag to its env twin and default. serveFlags is the table
// of the serve flags, their defaults server.DefaultSettings' (written once,
// there, and also what the proxy runs with when a setting is zero): --help
// prints it, the subcommands that share a flag with serve define it from it,
// and the tests hold docker-compose.yml, the Dockerfile and (through compose)
// the Helm chart to it.
type flagSpec struct {
	name, env, def, usage string
}

var defaults = server.DefaultSettings

var serveFlags = []flagSpec{
	{"listen", "CTXPROXY_LISTEN", server.DefaultListen, "address to listen on"},
	{"upstream", "CTXPROXY_UPSTREAM", defaults.Upstream, "upstream Messages API base URL"},
	{"policies", "CTXPROXY_POLICIES", defaults.Policies, "folder of tenant policy files"},
	{"memory-dir", "CTXPROXY_MEMORY_DIR", defaults.MemoryDir, "folder of the file memory store"},
	{"memory-store", "CTXPROXY_MEMORY_STORE", defaults.MemoryStore, "memory store: file, or a postgres:// URL"},
	{"max-body", "CTXPROXY_MAX_BODY", sizeFlag(defaults.MaxBody), "largest request body"},
	{"log-level", "CTXPROXY_LOG_LEVEL", server.DefaultLogLevel, "debug, info, warn or error"},
	{"require-known-tenant", "CTXPROXY_REQUIRE_KNOWN_TENANT", "false", "answer 401 to clients that match no tenant"},
	{"forward-while-reading", "CTXPROXY_FORWARD_WHILE_READING", "false", "send a Messages or count_tokens body of 256 KiB or more upstream while it arrives (default: read each body whole first)"},
	{"ledger", "CTXPROXY_LEDGER", defaults.Ledger, "usage ledger: file:PATH or a postgres:// URL"},
	{"prices", "CTXPROXY_PRICES", "", "prices file laid over the built-in price table (default: prices.yaml in the policies folder, if any)"},
	{"admin-token", "CTXPROXY_ADMIN_TOKEN", "", "token for /admin endpoints; unset disables them. Set it in the environment: a flag's value is readable by every local user (ps, /proc/PID/cmdline)"},
	{"memory-audit", "CTXPROXY_MEMORY_AUDIT", "", "audit log of the memory operator API and the console; unset: memory-audit.jsonl in the data folder (the parent of --memory-dir)"},
	{"upstream-timeout", "CTXPROXY_UPSTREAM_TIMEOUT", durationFlag(defaults.UpstreamTimeout), "longest wait for the upstream's first byte"},
	{"stream-idle-timeout", "CTXPROXY_STREAM_IDLE_TIMEOUT", durationFlag(defaults.StreamIdleTimeout), "longest silence between stream events"},
	{"shutdown-grace", "CTXPROXY_SHUTDOWN_GRACE", durationFlag(server.DefaultShutdownGrace), "how long open requests may finish on SIGTERM"},
	{"limits-store", "CTXPROXY_LIMITS_STORE", "", "spend counters: memory, or a postgres:// URL (default: --ledger when it is postgres://, else memory)"},
	{"ratelimit-store", "CTXPROXY_RATELIMIT_STORE", "", "per-minute limits: memory, redis://, or postgres:// (default: the limits store)"},
	{"debug-addr", "CTXPROXY_DEBUG_ADDR", "", "address of a separate pprof and /debug/stats listener; keep it on 127.0.0.1; unset: off"},
	{"debug-poison-buffers", "CTXPROXY_DEBUG_POISON_BUFFERS", "false", "a debugging aid: overwrite each pooled request-body buffer as it is released, so a value still pointing into one (a ledger line's model, a log field) shows the poison at once; costs a write of every large body"},
	{"debug-manual-clock", "CTXPROXY_DEBUG_MANUAL_CLOCK", "false", "a testing aid: the clock that says how long a conversation rested between calls (a prompt cache's TTL) moves only by POST /debug/clock {\"advance\":\"6m\"} on --debug-addr"},
	{"debug-no-cache-tracking", "CTXPROXY_DEBUG_NO_CACHE_TRACKING", "false", "a benchmark aid: track no conversation, so no clearing call's cache effect is measured (its ledger line says unknown) and no cache diagnosis is asked; shows what the conversation lookup costs"},
	{"trusted-proxies", "CTXPROXY_TRUSTED_PROXIES", "", "comma-separated addresses or CIDRs of the front proxies whose X-Forwarded-Proto ctxproxy believes (the console's cookie is then Secure for https); unset: none"},
	{"metrics-addr", "CTXPROXY_METRICS_ADDR", "", "address of the listener serving /metrics to Prometheus, apart from the agents' (it names every tenant, its spend and caps); unset: /metrics is on the --debug-addr listener, or nowhere"},
}

// serveFlag is the serve flag called name.
func serveFlag(name string) flagSpec {
	for _, s := range serveFlags {
		if s.name == name {
			return s
		}
	}
	panic("no serve flag " + name)
}

// define declares s on fs, for a subcommand that shares the flag with serve:
// the same name, environment twin and default. usage "" is serve's.
func (s flagSpec) define(fs *flag.FlagSet, getenv func(string) string, usage string) *string {
	if usage == "" {
		usage = s.usage
	}
	return envString(fs, getenv, s.name, s.env, s.def, fmt.Sprintf("%s (env %s)", usage, s.env))
}

// envString defines a string flag that starts as the environment variable
// env (else def), while -h shows def: a value from the environment, often a
// token or a URL with a password, is never printed as a default.
func envString(fs *flag.FlagSet, getenv func(string) string, name, env, def, usage string) *string {
	p := fs.String(name, envOr(getenv, env, def), usage)
	fs.Lookup(name).DefValue = def
	return p
}

// tokenEnv is the variable of --token, the operator or admin token that
// `ctxproxy keys` and `ctxproxy memory` send; tokenEnvOld are its former
// names, still read when it is unset.
const tokenEnv = "CTXPROXY_TOKEN"

var tokenEnvOld = []string{"CTXPROXY_OPERATOR_TOKEN", "CTXPROXY_ADMIN_TOKEN"}

// tokenFlag defines --token (env CTXPROXY_TOKEN) on fs.
func tokenFlag(fs *flag.FlagSet, getenv func(string) string, p *string) {
	v := getenv(tokenEnv)
	for _, old := range tokenEnvOld {
		if v == "" {
			v = getenv(old)
		}
	}
	fs.StringVar(p, "token", v, "the admin token, or a tenant's operator token (env "+tokenEnv+")")
	fs.Lookup("token").DefValue = ""
}

// boolFlags are the serve flags that are booleans: given bare, shown as
// booleans in --help.
var boolFlags = map[string]bool{"require-known-tenant": true, "forward-while-reading": true, "debug-poison-buffers": true, "debug-manual-clock": true, "debug-no-cache-tracking": true}

// boolString is a boolean flag kept as its text (parsed with the others): it
// tells package flag it is a boolean, so --help shows it as one and a bare
// --flag means true.
type boolString struct{ s string }

func (b *boolString) String() string {
	if b == nil || b.s == "" {
		return "false"
	}
	return b.s
}

func (b *boolString) Set(v string) error { b.s = v; return nil }
func (b *boolString) IsBoolFlag() bool   { return true }

// usageHead is the top of `ctxproxy --help`: the subcommands, then the
// serve flags.
const usageHead = `Usage: ctxproxy [serve] [flags]
       ctxproxy COMMAND [flags]

Commands:
  serve      run the proxy (the default, without a command)
  migrate    apply the PostgreSQL schemas of --memory-store, --ledger and --limits-store, then exit
  validate   check the policy files
  report     print the cost report from the ledger
  advise     say which context-management policy a tenant should run (its shadow candidates, measured)
  memory     the tenants' memory: ls, cat, history, diff, restore, export, import, purge
  keys       create, list, revoke or rotate ctxproxy keys (sk-ctx-…) of a running ctxproxy
  demo       run a scripted agent session against a fake Anthropic API
  version    print the version
  help       print this help

Flags of serve:
`

// printUsage writes `ctxproxy --help`: the commands, then serve's flags.
func printUsage(w io.Writer) {
	_, fs, _ := parseConfig("ctxproxy", nil, func(string) string { return "" }, serveFlags)
	fs.SetOutput(w)
	fs.Usage()
}

// parseConfig reads flags (args) over environment over defaults.
func parseConfig(name string, args []string, getenv func(string) string, specs []flagSpec) (*config, *flag.FlagSet, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if name == "ctxproxy" {
		fs.Usage = func() {
			fmt.Fprint(fs.Output(), usageHead)
			fs.PrintDefaults()
		}
	}
	vals := map[string]*string{}
	for _, s := range specs {
		def := s.def
		if v := getenv(s.env); v != "" {
			def = v
		}
		usage := fmt.Sprintf("%s (env %s)", s.usage, s.env)
		if boolFlags[s.name] {
			b := &boolString{s: def}
			vals[s.name] = &b.s
			fs.Var(b, s.name, usage)
			fs.Lookup(s.name).DefValue = (&boolString{s: s.def}).String() // not the environment's
			continue
		}
		vals[s.name] = envString(fs, getenv, s.name, s.env, s.def, usage)
	}
	if err := fs.Parse(normaliseBoolFlags(args, boolFlags)); err != nil {
		return nil, fs, err
	}
	c := &config{}
	get := func(n string) string {
		if p, ok := vals[n]; ok {
			return *p
		}
		return ""
	}
	var err error
	c.Listen = get("listen")
	c.Upstream = get("upstream")
	c.Policies = get("policies")
	c.MemoryDir = get("memory-dir")
	c.MemoryStore = get("memory-store")
	c.LogLevel = get("log-level")
	c.Ledger = get("ledger")
	c.Prices = get("prices")
	c.AdminToken = get("admin-token")
	fs.Visit(func(f *flag.Flag) { c.AdminTokenFlag = c.AdminTokenFlag || f.Name == "admin-token" })
	c.MemoryAudit = get("memory-audit")
	c.DebugAddr = get("debug-addr")
	c.MetricsAddr = get("metrics-addr")
	if c.TrustedProxies, err = parsePrefixes(get("trusted-proxies")); err != nil {
		return nil, fs, fmt.Errorf("--trusted-proxies: %w", err)
	}
	c.LimitsStore = get("limits-store")
	c.RatelimitStore = get("ratelimit-store")
	if v := get("max-body"); v != "" {
		if c.MaxBody, err = parseSize(v); err != nil {
			return nil, fs, fmt.Errorf("--max-body: %w", err)
		}
	}
	if v := get("require-known-tenant"); v != "" {
		if c.RequireKnownTenant, err = strconv.ParseBool(v); err != nil {
			return nil, fs, fmt.Errorf("--require-known-tenant: %w", err)
		}
	}
	if v := get("forward-while-reading"); v != "" {
		if c.ForwardWhileReading, err = strconv.ParseBool(v); err != nil {
			return nil, fs, fmt.Errorf("--forward-while-reading: %w", err)
		}
	}
	if v := get("debug-manual-clock"); v != "" {
		if c.DebugManualClock, err = strconv.ParseBool(v); err != nil {
			return nil, fs, fmt.Errorf("--debug-manual-clock: %w", err)
		}
	}
	if v := get("debug-no-cache-tracking"); v != "" {
		if c.DebugNoCacheTracking, err = strconv.ParseBool(v); err != nil {
			return nil, fs, fmt.Errorf("--debug-no-cache-tracking: %w", err)
		}
	}
	if v := get("debug-poison-buffers"); v != "" {
		if c.DebugPoisonBuffers, err = strconv.ParseBool(v); err != nil {
			return nil, fs, fmt.Errorf("--debug-poison-buffers: %w", err)
		}
	}
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{{"upstream-timeout", &c.UpstreamTimeout}, {"stream-idle-timeout", &c.StreamIdleTimeout}, {"shutdown-grace", &c.ShutdownGrace}} {
		if v := get(d.name); v != "" {
			if *d.dst, err = time.ParseDuration(v); err != nil {
				return nil, fs, fmt.Errorf("--%s: %w", d.name, err)
			}
		}
	}
	return c, fs, nil
}

// normaliseBoolFlags turns "--flag true|false" (the value as a separate
// argument, which package flag takes for a positional one) into
// "--flag=true|false" for the boolean flags.
func normaliseBoolFlags(args []string, bools map[string]bool) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if bare := strings.TrimLeft(a, "-"); bare != a && bools[bare] && i+1 < len(args) {
			if _, err := strconv.ParseBool(args[i+1]); err == nil {
				out = append(out, a+"="+args[i+1])
				i++
				continue
			}
		}
		out = append(out, a)
	}
	return out
}

// parsePrefixes reads "10.0.0.0/8, 192.168.1.7, ::1": addresses and CIDRs.
func parsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an IP address nor a CIDR", f)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// parseSize reads 32MiB, 1MB, 512KiB, 1048576.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
		{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1},
	}
	mult := int64(1)
	num := s
	for _, u := range units {
		if strings.HasSuffix(strings.ToUpper(s), strings.ToUpper(u.suffix)) {
			num = strings.TrimSpace(s[:len(s)-len(u.suffix)])
			mult = u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q: want a positive number with an optional unit (KiB, MiB, GiB)", s)
	}
	return n * mult, nil
}

func envOr(getenv func(string) string, k, def string) string {
	if v := getenv(k); v != "" {
		return v
	}
	return def
}

// sizeFlag is n as --max-body reads and --help shows it: in the largest
// binary unit that divides it (32MiB).
func sizeFlag(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// durationFlag is d as --help shows it: 10m, not 10m0s.
func durationFlag(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
