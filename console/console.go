// Package console is the operator console: server-rendered HTML pages under
// /admin/ui/ where a platform team sees its tenants, the policy in force,
// spend against caps, cost and savings, health, and the memory the proxy
// keeps (file tree, content, versions, diffs), and restores, exports or
// purges it.
//
// It is built from the standard library only: html/template pages embedded
// in the binary, charts drawn as inline SVG on the server, one stylesheet
// served from here, no script at all. Every view is a GET URL linked from
// /admin/ui/; every action is a form POST carrying a CSRF token. The
// Content-Security-Policy forbids every origin but this one, so the page
// makes no external request. A sign-in is a session of the console's own
// (auth.go), kept server-side (Sessions).
//
// It has no logic of its own for what it shows: reports come from tokens,
// spend from the limits enforcer, memory reads and writes from memoryhook's
// Governed store and Operator (what the /v1/memory_stores API and the CLI
// use), authorisation from package admin (the admin token for every tenant,
// a tenant's operator token for its own).
package console

import (
	"context"
	"embed"
	"fmt"
	"github.com/ctxproxy/ctxproxy/capabilities"
	"html/template"
	"io/fs"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/admin"
	"github.com/ctxproxy/ctxproxy/keys"
	"github.com/ctxproxy/ctxproxy/memapi"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// Prefix is where the console is served.
const Prefix = "/admin/ui/"

// Config is what the console reads and acts on. Nil parts are shown as
// "not configured".
type Config struct {
	Auth     admin.Auth
	Policies *policy.Store
	Ledger   tokens.Ledger         // cost and savings
	Spend    tokens.CapsFunc       // spend against caps (the limits store)
	Memory   memoryhook.Governed   // memory pages and actions
	Keys     *keys.Keyring         // ctxproxy keys, by id
	Prices   func() *tokens.Prices // the prices in force (the advisor's TTL arithmetic); nil: the built-in table
	Ready    func(context.Context) []Check
	Metrics  prometheus.Gatherer // recent errors by status
	// Models says which models a tenant uses that the API lists as
	// deprecated or retired (package capabilities); nil: none shown.
	Models interface {
		Retiring(tenant string) []capabilities.Retiring
	}
	Audit *memapi.Audit // the operator audit log; every memory page and action is recorded
	Log   *zap.Logger
	Now   func() time.Time // default time.Now
	// Sessions keeps sign-ins; default: this process's memory (one replica).
	Sessions Sessions
	// TrustedProxies are the front proxies whose X-Forwarded-Proto says
	// whether the browser's connection is TLS (the session cookie is then
	// Secure).
	TrustedProxies []netip.Prefix
}

// Check is one readiness check.
type Check struct {
	Name   string
	OK     bool
	Detail string
}

//go:embed templates/*.html static/*
var files embed.FS

// Console is the http.Handler serving Prefix.
type Console struct {
	cfg   Config
	pages map[string]*template.Template
	mux   *http.ServeMux
	cross *http.CrossOriginProtection
}

// New builds the console.
func New(cfg Config) (*Console, error) {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sessions == nil {
		cfg.Sessions = NewMemorySessions()
	}
	c := &Console{cfg: cfg, pages: map[string]*template.Template{}, cross: http.NewCrossOriginProtection()}
	names, err := fs.Glob(files, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		base := strings.TrimSuffix(filepath.Base(n), ".html")
		if base == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", n, err)
		}
		c.pages[base] = t
	}
	c.mux = c.routes()
	return c, nil
}

func (c *Console) routes() *http.ServeMux {
	m := http.NewServeMux()
	static, _ := fs.Sub(files, "static")
	m.Handle("GET "+Prefix+"static/", http.StripPrefix(Prefix+"static/", http.FileServerFS(static)))
	m.HandleFunc("GET "+Prefix+"login", c.loginForm)
	m.HandleFunc("POST "+Prefix+"login", c.login)
	m.HandleFunc("POST "+Prefix+"logout", c.authed(c.logout))
	m.HandleFunc("GET "+Prefix+"{$}", c.authed(c.tenants))
	m.HandleFunc("GET "+Prefix+"tenants/{tenant}", c.tenant(c.tenantPage))
	m.HandleFunc("GET "+Prefix+"tenants/{tenant}/money", c.tenant(c.moneyPage))
	m.HandleFunc("GET "+Prefix+"tenants/{tenant}/memory", c.memoryRoute(c.memoryTree))
	m.HandleFunc("GET "+Prefix+"tenants/{tenant}/memory/{id}", c.memoryRoute(c.memoryFile))
	m.HandleFunc("GET "+Prefix+"tenants/{tenant}/memory/{id}/diff", c.memoryRoute(c.memoryDiff))
	m.HandleFunc("GET "+Prefix+"tenants/{tenant}/memory/{id}/restore", c.memoryRoute(c.restoreConfirm))
	m.HandleFunc("POST "+Prefix+"tenants/{tenant}/memory/{id}/restore", c.memoryRoute(c.restore))
	m.HandleFunc("GET "+Prefix+"tenants/{tenant}/export", c.memoryRoute(c.export))
	m.HandleFunc("GET "+Prefix+"tenants/{tenant}/purge", c.memoryRoute(c.purgeConfirm))
	m.HandleFunc("POST "+Prefix+"tenants/{tenant}/purge", c.memoryRoute(c.purge))
	m.HandleFunc("GET "+Prefix+"health", c.authed(c.health))
	return m
}

// csp allows this origin's stylesheet and forms only: no script, no
// external request of any kind.
const csp = "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	if !c.cfg.Auth.Enabled() {
		http.Error(w, "the operator console is disabled: start ctxproxy with --admin-token", http.StatusNotFound)
		return
	}
	// A form posted from another origin (the browser says so) is refused
	// before anything reads it: the sign-in's included.
	if err := c.cross.Check(r); err != nil {
		c.fail(w, r, http.StatusForbidden, "This form was posted from another site; nothing was done.")
		return
	}
	c.mux.ServeHTTP(w, r)
}

// page is what every template gets.
type page struct {
	Title  string
	Who    admin.Principal
	CSRF   string
	Tenant string // the tenant the page is about, for the navigation
	Data   any
	Flash  string
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, name string, status int, p page) {
	t := c.pages[name]
	if t == nil {
		http.Error(w, "no page "+name, http.StatusInternalServerError)
		return
	}
	if s, ok := session(r); ok {
		p.Who, p.CSRF = s.who, s.csrf
	}
	p.Flash = r.URL.Query().Get("done")
	var b strings.Builder
	if err := t.Execute(&b, p); err != nil {
		c.cfg.Log.Error("console page failed", zap.String("page", name), zap.Error(err))
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write([]byte(b.String()))
}

// fail shows an error page.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	c.render(w, r, "error", status, page{Title: http.StatusText(status), Data: msg})
}

var funcs = template.FuncMap{
	"usd":    func(f float64) string { return fmt.Sprintf("$%.6f", f) },
	"usd2":   func(f float64) string { return fmt.Sprintf("$%.2f", f) },
	"num":    func(n int64) string { return groupDigits(n) },
	"money4": func(m tokens.Money) string { return "$" + m.Fixed(4) },
	"share":  func(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) },
	"rate": func(f *float64) string {
		if f == nil {
			return "unknown"
		}
		return fmt.Sprintf("%.1f%%", 100**f)
	},
	"pct": func(a, b float64) string {
		if b <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f%%", 100*a/b)
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"bytes": func(n int64) string {
		switch {
		case n >= 1<<20:
			return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
		case n >= 1<<10:
			return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
		}
		return fmt.Sprintf("%d B", n)
	},
	"short": func(s string) string {
		if len(s) > 12 {
			return s[:12]
		}
		return s
	},
}

func groupDigits(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
