package console

import (
	"github.com/ctxproxy/ctxproxy/capabilities"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/advise"
	"github.com/ctxproxy/ctxproxy/internal/apikey"
	"github.com/ctxproxy/ctxproxy/keys"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// tenantView is one tenant's policy in force, as a person reads it.
type tenantView struct {
	Name       string
	File       string // relative to the policies folder
	Line       int
	CMMode     string
	Edits      []string
	Threads    string
	MemoryMode string
	Limits     string
	PolicyKeys []string // 8-hex ids of api_keys_sha256
	OwnKey     bool     // ctxproxy holds the tenant's Anthropic key
	Keys       []keyView
	Spend      []tokens.CapRow
	SpendErr   string
	Cost       float64
	Savings    float64
	// Retiring are the models the tenant uses (or its policy names) that
	// the API lists as deprecated or retired.
	Retiring []capabilities.Retiring
	// Advice is the policy lab's advice over the last AdviceDays, for a tenant with shadow
	// candidates (nil otherwise).
	Advice    *advise.Advice
	AdviceErr string
}

// AdviceDays is the window of the tenant page's advice.
const AdviceDays = 30

type keyView struct {
	ID, KeyID, Name, User, State string
}

func (c *Console) view(p *policy.Policy) tenantView {
	v := tenantView{Name: p.Tenant, File: c.relFile(p.File), Line: p.Line,
		CMMode: string(p.ContextManagement.Mode), Threads: string(p.ContextManagement.Threads),
		MemoryMode: string(p.Memory.Mode)}
	cm := p.ContextManagement
	if cm.ClearThinking != nil {
		v.Edits = append(v.Edits, policy.EditClearThinking)
	}
	if cm.ClearToolUses != nil {
		v.Edits = append(v.Edits, policy.EditClearToolUses)
	}
	if cm.Compact != nil {
		v.Edits = append(v.Edits, "compact_20260112")
	}
	if p.Limits.Any() {
		v.Limits = p.Limits.String()
	}
	for _, h := range p.KeyHashes {
		v.PolicyKeys = append(v.PolicyKeys, apikey.ID(h))
	}
	_, v.OwnKey = p.UpstreamKey()
	return v
}

// relFile names a policy file relative to the policies folder: the host
// path of the folder is the operator's, not the page's.
func (c *Console) relFile(f string) string {
	if rel, err := filepath.Rel(c.cfg.Policies.Dir(), f); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return filepath.Base(f)
}

// visible is the tenants the session may see, by name.
func (c *Console) visible(r *http.Request) []*policy.Policy {
	s, _ := session(r)
	var out []*policy.Policy
	for _, p := range c.cfg.Policies.Current().Tenants() {
		if s.who.May(p.Tenant) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out
}

type indexData struct {
	Tenants []tenantView
	Reload  reloadView
	Top     []tenantView // by savings, most first
}

// tenants is the console's home: every visible tenant, its policy, what it
// spent and saved this month.
func (c *Console) tenants(w http.ResponseWriter, r *http.Request) {
	d := indexData{Reload: c.reload(r)}
	month := monthStart(c.cfg.Now())
	totals := c.totalsByTenant(r, month)
	for _, p := range c.visible(r) {
		v := c.view(p)
		if t, ok := totals[p.Tenant]; ok {
			v.Cost, v.Savings = t.CostUSD.USD(), t.SavingsUSD.USD()
		}
		v.Spend, v.SpendErr = c.spend(r, p)
		if c.cfg.Models != nil {
			v.Retiring = c.cfg.Models.Retiring(p.Tenant)
		}
		d.Tenants = append(d.Tenants, v)
	}
	for _, v := range d.Tenants {
		if v.Savings > 0 {
			d.Top = append(d.Top, v)
		}
	}
	sort.SliceStable(d.Top, func(i, j int) bool { return d.Top[i].Savings > d.Top[j].Savings })
	if len(d.Top) > 5 {
		d.Top = d.Top[:5]
	}
	c.render(w, r, "tenants", http.StatusOK, page{Title: "Tenants", Data: d})
}

// tenantPage is one tenant: its policy, keys and spend against its caps.
func (c *Console) tenantPage(w http.ResponseWriter, r *http.Request) {
	p := c.cfg.Policies.Current().Tenant(r.PathValue("tenant"))
	v := c.view(p)
	v.Spend, v.SpendErr = c.spend(r, p)
	if c.cfg.Models != nil {
		v.Retiring = c.cfg.Models.Retiring(p.Tenant)
	}
	if c.cfg.Keys != nil {
		ks, err := c.cfg.Keys.List(r.Context(), p.Tenant)
		if err == nil {
			for _, k := range ks {
				state := "active"
				switch k.State(c.cfg.Now()) {
				case keys.ErrRevoked:
					state = "revoked"
				case keys.ErrExpired:
					state = "expired"
				}
				v.Keys = append(v.Keys, keyView{ID: k.ID, KeyID: k.KeyID(), Name: k.Name, User: k.User, State: state})
			}
		}
	}
	v.Advice, v.AdviceErr = c.advice(r, p)
	c.render(w, r, "tenant", http.StatusOK, page{Title: p.Tenant, Tenant: p.Tenant, Data: struct{ T tenantView }{v}})
}

// advice is the policy lab's advice for a tenant with shadow candidates, over the last
// AdviceDays (package advise: the same as `ctxproxy advise`).
func (c *Console) advice(r *http.Request, p *policy.Policy) (*advise.Advice, string) {
	if !p.HasShadow() || c.cfg.Ledger == nil {
		return nil, ""
	}
	since := c.cfg.Now().AddDate(0, 0, -AdviceDays)
	calls, err := c.cfg.Ledger.Query(r.Context(), tokens.Filter{Tenant: p.Tenant, Since: since})
	if err != nil {
		return nil, "The ledger could not be read: " + err.Error()
	}
	var prices *tokens.Prices
	if c.cfg.Prices != nil {
		prices = c.cfg.Prices()
	}
	a := advise.Build(p.Tenant, calls, prices)
	a.Since = &since
	return &a, ""
}

func (c *Console) spend(r *http.Request, p *policy.Policy) ([]tokens.CapRow, string) {
	if c.cfg.Spend == nil || !p.Limits.Capped() {
		return nil, ""
	}
	lines, err := c.cfg.Spend(r.Context(), p.Tenant)
	if err != nil {
		return nil, "spend store unavailable: " + err.Error()
	}
	return lines, ""
}

// totalsByTenant is each tenant's cost and savings since from.
func (c *Console) totalsByTenant(r *http.Request, from time.Time) map[string]tokens.Totals {
	out := map[string]tokens.Totals{}
	if c.cfg.Ledger == nil {
		return out
	}
	rep, err := tokens.RunReport(r.Context(), c.cfg.Ledger, tokens.Filter{Since: from}, "model")
	if err != nil {
		return out
	}
	for _, t := range rep.Tenants {
		out[t.Tenant] = t.Totals
	}
	return out
}

// reloadView is the outcome of the last policy load as the session may see
// it: a tenant token sees the problems of its own tenant's policy file only
// (other files name other tenants, their files and lines), and how many it
// may not see.
type reloadView struct {
	At       time.Time
	OK       bool
	Problems []string // file:line: problem, the file relative to the policies folder
	Hidden   int      // problems in files this session may not see
}

func (c *Console) reload(r *http.Request) reloadView {
	st := c.cfg.Policies.LastReload()
	v := reloadView{At: st.At, OK: st.OK()}
	s, _ := session(r)
	own := ""
	if s.who.Tenant != "" {
		if p := c.cfg.Policies.Current().Tenant(s.who.Tenant); p != nil {
			own = p.File
		}
	}
	dir := c.cfg.Policies.Dir()
	for _, e := range st.Problems {
		if s.who.Tenant != "" && (own == "" || e.File != own) {
			v.Hidden++
			continue
		}
		if e.File != "" {
			e.File = c.relFile(e.File)
		}
		// A message may name another file by its host path (a duplicate tenant).
		e.Msg = strings.ReplaceAll(e.Msg, dir+string(filepath.Separator), "")
		v.Problems = append(v.Problems, e.Error())
	}
	return v
}
