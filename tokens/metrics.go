package tokens

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/apierr"
	"github.com/ctxproxy/ctxproxy/internal/modelid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// OtherLabel stands for every tenant, model, edit type or command not known from config.
const OtherLabel = "other"

// Metrics holds ctxproxy's Prometheus metrics in its own registry. Label values are bounded:
// tenants come from SetTenants, models from the prices file (a prefix entry is one label),
// anything else is "other". Safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	requests        *prometheus.CounterVec   // tenant, model, status
	upstreamCalls   *prometheus.CounterVec   // tenant, model, status
	upstream        *prometheus.HistogramVec // tenant, model
	overhead        *prometheus.HistogramVec // tenant
	tokensTotal     *prometheus.CounterVec   // tenant, model, kind
	clearedInput    *prometheus.CounterVec   // tenant, edit
	clearedToolUses *prometheus.CounterVec   // tenant, edit
	clearedThinking *prometheus.CounterVec   // tenant, edit
	memory          *prometheus.CounterVec   // tenant, command, result
	gateRefusals    *prometheus.CounterVec   // tenant, reason
	cost            *prometheus.CounterVec   // tenant, model
	savings         *prometheus.CounterVec   // tenant, model
	savingsGross    *prometheus.CounterVec   // tenant, model
	cachePenalty    *prometheus.CounterVec   // tenant, model
	cacheMissed     *prometheus.CounterVec   // tenant, cause
	compactions     *prometheus.CounterVec   // tenant, model
	compactionCost  *prometheus.CounterVec   // tenant, model
	compactionSaved *prometheus.CounterVec   // tenant, model
	webSearches     *prometheus.CounterVec   // tenant, model
	priceUnknown    *prometheus.CounterVec   // tenant
	errors          *prometheus.CounterVec   // tenant, status, type, code
	openStreams     *prometheus.GaugeVec     // tenant
	ledgerErrors    prometheus.Counter
	ledgerDropped   prometheus.Counter
	shadowDropped   *prometheus.CounterVec // tenant, candidate
	shadowErrors    *prometheus.CounterVec // tenant, candidate
	transformations *prometheus.CounterVec // tenant, type, reason

	tenants atomic.Pointer[map[string]struct{}]
	models  atomic.Pointer[modelSet]

	mu       sync.RWMutex
	children map[[2]string]*pairChildren   // (tenant, model) labels
	tenantCh map[string]*tenantChildren    // tenant label
	reqCh    map[reqKey]prometheus.Counter // requests_total children
	callCh   map[reqKey]prometheus.Counter // upstream_calls_total children
}

type reqKey struct {
	tenant, model string
	status        int
}

// pairChildren caches the label-bound series of one (tenant, model) pair: no map lookups with
// label hashing on the hot path.
type pairChildren struct {
	upstream                                prometheus.Observer
	input, output, cacheCreation, cacheRead prometheus.Counter
	cost, savings                           prometheus.Counter
	savingsGross, cachePenalty              prometheus.Counter
	compactions, compactionCost, webSearch  prometheus.Counter
	compactionSaved                         prometheus.Counter
}

type tenantChildren struct {
	overhead     prometheus.Observer
	priceUnknown prometheus.Counter
	openStreams  prometheus.Gauge
	// per edit type: clear_tool_uses, clear_thinking, other
	clearedInput, clearedToolUses, clearedThinking [3]prometheus.Counter
	// per memory command × result
	memory [len(memoryCommands) + 1][2]prometheus.Counter
	// per cache miss cause (MissCauses)
	cacheMissed [len(MissCauses)]prometheus.Counter
}

var memoryCommands = [...]string{"view", "create", "str_replace", "insert", "delete", "rename"}

var editLabels = [3]string{EditClearToolUses, EditClearThinking, OtherLabel}

func editIndex(t string) int {
	switch t {
	case EditClearToolUses:
		return 0
	case EditClearThinking:
		return 1
	}
	return 2
}

// causeIndex is cause's place in MissCauses, -1 for none.
func causeIndex(cause string) int {
	for i, c := range MissCauses {
		if c == cause {
			return i
		}
	}
	return -1
}

// modelSet is the bounded set of model labels.
type modelSet struct {
	exact map[string]struct{}
}

// NewMetrics builds the metrics with their own registry. tenants are the known tenant names,
// models the model labels (Prices.Models: exact names and prefixes, matched like prices.yaml
// entries); anything else is "other". Both can be replaced later (SetTenants, SetModels).
func NewMetrics(tenants, models []string) *Metrics {
	m := &Metrics{
		reg:      prometheus.NewRegistry(),
		children: map[[2]string]*pairChildren{},
		tenantCh: map[string]*tenantChildren{},
		reqCh:    map[reqKey]prometheus.Counter{},
		callCh:   map[reqKey]prometheus.Counter{},
	}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_requests_total", Help: "Client requests by tenant, model and HTTP status.",
	}, []string{"tenant", "model", "status"})
	m.upstreamCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_upstream_calls_total", Help: "Upstream Messages calls (each call of the memory loop counts) by tenant, model and status.",
	}, []string{"tenant", "model", "status"})
	m.upstream = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "ctxproxy_upstream_duration_seconds", Help: "Time spent waiting for the upstream per client request.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320},
	}, []string{"tenant", "model"})
	m.overhead = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "ctxproxy_overhead_seconds", Help: "Time ctxproxy adds to a request (total minus upstream).",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
	}, []string{"tenant"})
	m.tokensTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_tokens_total", Help: "Tokens by tenant, model and kind (input, output, cache_creation, cache_read).",
	}, []string{"tenant", "model", "kind"})
	m.clearedInput = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_cleared_input_tokens_total", Help: "Input tokens removed by context editing, by tenant and edit type.",
	}, []string{"tenant", "edit"})
	m.clearedToolUses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_cleared_tool_uses_total", Help: "Tool uses cleared by context editing, by tenant and edit type.",
	}, []string{"tenant", "edit"})
	m.clearedThinking = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_cleared_thinking_turns_total", Help: "Thinking turns cleared by context editing, by tenant and edit type.",
	}, []string{"tenant", "edit"})
	m.memory = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_memory_commands_total", Help: "Memory tool commands run by the proxy, by tenant, command and result (ok, error).",
	}, []string{"tenant", "command", "result"})
	m.gateRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_memory_gate_refusals_total", Help: "Memory writes of the model refused before they persisted, by tenant and reason (read_only, secret, rate).",
	}, []string{"tenant", "reason"})
	m.cost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_cost_usd_total", Help: "Estimated cost at list prices in USD, by tenant and model.",
	}, []string{"tenant", "model"})
	m.savings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_savings_usd_total", Help: "Gross savings of context editing in USD (equal to ctxproxy_savings_gross_usd_total; net is gross minus ctxproxy_cache_penalty_usd_total).",
	}, []string{"tenant", "model"})
	m.savingsGross = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_savings_gross_usd_total", Help: "Gross savings of context editing in USD: cleared input tokens at the cache read price when the call used the cache, else the input price.",
	}, []string{"tenant", "model"})
	m.cachePenalty = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_cache_penalty_usd_total", Help: "What context editing's cache misses cost in USD (missed tokens re-written: write price − read price); net savings = gross − penalty.",
	}, []string{"tenant", "model"})
	m.cacheMissed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_cache_missed_input_tokens_total", Help: "Prompt cache tokens a call missed that the conversation's previous call had cached, by tenant and cause (edits, expiry, model, system, tools, client).",
	}, []string{"tenant", "cause"})
	m.compactions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_compactions_total", Help: "Server-side compactions (compaction entries of usage.iterations), by tenant and model.",
	}, []string{"tenant", "model"})
	m.compactionCost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_compaction_cost_usd_total", Help: "Estimated cost of the compaction steps in USD (part of ctxproxy_cost_usd_total), by tenant and model.",
	}, []string{"tenant", "model"})
	m.compactionSaved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_compaction_savings_usd_total", Help: "Estimated savings of compaction in USD, measured with count_tokens (compact.measure_savings), by tenant and model.",
	}, []string{"tenant", "model"})
	m.webSearches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_web_search_requests_total", Help: "Web searches the API ran (usage.server_tool_use.web_search_requests), by tenant and model.",
	}, []string{"tenant", "model"})
	m.errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_errors_total", Help: "Error answers clients got (status 400 and up, 499 for a client gone first), by tenant, status, error.type and error.details.error_code (none when the answer had none; other for a value the API does not document).",
	}, []string{"tenant", "status", "type", "code"})
	m.priceUnknown = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_price_unknown_total", Help: "Upstream calls whose model has no price in prices.yaml.",
	}, []string{"tenant"})
	m.openStreams = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ctxproxy_open_streams", Help: "Streamed client requests being relayed now, by tenant.",
	}, []string{"tenant"})
	m.ledgerErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ctxproxy_ledger_errors_total", Help: "Ledger records that could not be written.",
	})
	m.ledgerDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ctxproxy_ledger_dropped_total", Help: "Ledger records dropped because the write queue was full.",
	})
	m.shadowDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_shadow_dropped_total", Help: "Policy-lab count_tokens calls not made (the candidate's max_per_minute or the bound on calls in flight was reached), by tenant and candidate.",
	}, []string{"tenant", "candidate"})
	m.shadowErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_shadow_errors_total", Help: "Policy-lab count_tokens calls that failed (no answer, or not 200), by tenant and candidate.",
	}, []string{"tenant", "candidate"})
	m.transformations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_input_transformations_total", Help: "Thinking blocks of requests that the API dropped or let through despite a binding mismatch (input_transformations entries: type thinking_dropped or thinking_mismatch_allowed, reason the binding that failed; other for a value the API does not document), by tenant.",
	}, []string{"tenant", "type", "reason"})
	for _, c := range []prometheus.Collector{m.transformations, m.shadowDropped, m.shadowErrors, m.requests, m.upstreamCalls, m.upstream, m.overhead, m.tokensTotal,
		m.clearedInput, m.clearedToolUses, m.clearedThinking, m.memory, m.gateRefusals, m.cost, m.savings, m.savingsGross, m.cachePenalty, m.cacheMissed, m.priceUnknown, m.errors,
		m.compactions, m.compactionCost, m.compactionSaved, m.webSearches,
		m.openStreams, m.ledgerErrors, m.ledgerDropped,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		f(c)
	}
	m.SetTenants(tenants)
	m.SetModels(models)
	return m
}

// Registry is the metrics' own registry (for tests and extra collectors).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// SetTenants replaces the known tenant names (on policy reload). Series already created stay.
// Each tenant's per-tenant series (edit types, memory commands × results, overhead, open
// streams) are created at zero now, so a dashboard has a series for every panel before the
// first edit or memory call happens.
func (m *Metrics) SetTenants(tenants []string) {
	set := make(map[string]struct{}, len(tenants))
	for _, t := range tenants {
		set[t] = struct{}{}
	}
	m.tenants.Store(&set)
	for _, t := range tenants {
		m.tenant(t)
	}
}

// SetModels replaces the model labels (e.g. Prices.Models after reloading prices.yaml).
func (m *Metrics) SetModels(models []string) {
	ms := &modelSet{exact: make(map[string]struct{}, len(models))}
	for _, mo := range models {
		if mo == "" || mo == OtherLabel {
			continue
		}
		ms.exact[mo] = struct{}{}
	}
	m.models.Store(ms)
}

// TenantLabel is t when it is a known tenant, else "other".
func (m *Metrics) TenantLabel(t string) string {
	if _, ok := (*m.tenants.Load())[t]; ok {
		return t
	}
	return OtherLabel
}

// ModelLabel is model itself when it is a label, else the label of the model it is a dated
// snapshot of (modelid), else "other".
func (m *Metrics) ModelLabel(model string) string {
	ms := m.models.Load()
	if _, ok := ms.exact[model]; ok {
		return model
	}
	if b := modelid.Base(model); b != model {
		if _, ok := ms.exact[b]; ok {
			return b
		}
	}
	return OtherLabel
}

func (m *Metrics) pair(tenant, model string) *pairChildren {
	k := [2]string{m.TenantLabel(tenant), m.ModelLabel(model)}
	m.mu.RLock()
	c := m.children[k]
	m.mu.RUnlock()
	if c != nil {
		return c
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c = m.children[k]; c != nil {
		return c
	}
	t, mo := k[0], k[1]
	c = &pairChildren{
		upstream:        m.upstream.WithLabelValues(t, mo),
		input:           m.tokensTotal.WithLabelValues(t, mo, "input"),
		output:          m.tokensTotal.WithLabelValues(t, mo, "output"),
		cacheCreation:   m.tokensTotal.WithLabelValues(t, mo, "cache_creation"),
		cacheRead:       m.tokensTotal.WithLabelValues(t, mo, "cache_read"),
		cost:            m.cost.WithLabelValues(t, mo),
		savings:         m.savings.WithLabelValues(t, mo),
		savingsGross:    m.savingsGross.WithLabelValues(t, mo),
		cachePenalty:    m.cachePenalty.WithLabelValues(t, mo),
		compactions:     m.compactions.WithLabelValues(t, mo),
		compactionCost:  m.compactionCost.WithLabelValues(t, mo),
		compactionSaved: m.compactionSaved.WithLabelValues(t, mo),
		webSearch:       m.webSearches.WithLabelValues(t, mo),
	}
	m.children[k] = c
	return c
}

func (m *Metrics) tenant(tenant string) *tenantChildren {
	t := m.TenantLabel(tenant)
	m.mu.RLock()
	c := m.tenantCh[t]
	m.mu.RUnlock()
	if c != nil {
		return c
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c = m.tenantCh[t]; c != nil {
		return c
	}
	c = &tenantChildren{
		overhead:     m.overhead.WithLabelValues(t),
		priceUnknown: m.priceUnknown.WithLabelValues(t),
		openStreams:  m.openStreams.WithLabelValues(t),
	}
	for i, e := range editLabels {
		c.clearedInput[i] = m.clearedInput.WithLabelValues(t, e)
		c.clearedToolUses[i] = m.clearedToolUses.WithLabelValues(t, e)
		c.clearedThinking[i] = m.clearedThinking.WithLabelValues(t, e)
	}
	for i := range c.memory {
		cmd := OtherLabel
		if i < len(memoryCommands) {
			cmd = memoryCommands[i]
		}
		c.memory[i][0] = m.memory.WithLabelValues(t, cmd, "ok")
		c.memory[i][1] = m.memory.WithLabelValues(t, cmd, "error")
	}
	for i, cause := range MissCauses {
		c.cacheMissed[i] = m.cacheMissed.WithLabelValues(t, cause)
	}
	m.tenantCh[t] = c
	return c
}

func (m *Metrics) statusCounter(cache map[reqKey]prometheus.Counter, vec *prometheus.CounterVec, tenant, model string, status int) prometheus.Counter {
	if status < 100 || status > 599 {
		status = 0 // no HTTP status (e.g. connection failed)
	}
	k := reqKey{m.TenantLabel(tenant), m.ModelLabel(model), status}
	m.mu.RLock()
	c := cache[k]
	m.mu.RUnlock()
	if c != nil {
		return c
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c = cache[k]; c != nil {
		return c
	}
	c = vec.WithLabelValues(k.tenant, k.model, strconv.Itoa(status))
	cache[k] = c
	return c
}

// ObserveRequest counts one client request and its upstream time (all upstream calls) and the
// proxy's own overhead.
func (m *Metrics) ObserveRequest(tenant, model string, status int, upstream, overhead time.Duration) {
	m.statusCounter(m.reqCh, m.requests, tenant, model, status).Inc()
	m.pair(tenant, model).upstream.Observe(upstream.Seconds())
	m.tenant(tenant).overhead.Observe(overhead.Seconds())
}

// ObserveError counts one error answer a client got: its status, error.type and
// error.details.error_code, bounded as apierr.TypeLabel and CodeLabel bound them.
func (m *Metrics) ObserveError(tenant string, status int, typ, code string) {
	if status < 100 || status > 599 {
		status = 0
	}
	m.errors.WithLabelValues(m.TenantLabel(tenant), strconv.Itoa(status), apierr.TypeLabel(typ), apierr.CodeLabel(code)).Inc()
}

// MemoryCommand counts one memory tool command run by the proxy.
func (m *Metrics) MemoryCommand(tenant, command string, isError bool) {
	i := len(memoryCommands)
	for j, c := range memoryCommands {
		if c == command {
			i = j
			break
		}
	}
	r := 0
	if isError {
		r = 1
	}
	m.tenant(tenant).memory[i][r].Inc()
}

// MemoryRefusal counts one memory write refused by the scopes or the gate;
// reason is read_only, secret or rate (anything else counts as other).
func (m *Metrics) MemoryRefusal(tenant, reason string) {
	switch reason {
	case "read_only", "secret", "rate":
	default:
		reason = OtherLabel
	}
	m.gateRefusals.WithLabelValues(m.TenantLabel(tenant), reason).Inc()
}

// ObserveCall counts the tokens, cleared tokens, cost and savings of one priced upstream call.
func (m *Metrics) ObserveCall(c *Call) {
	m.statusCounter(m.callCh, m.upstreamCalls, c.Tenant, c.Model, c.Status).Inc()
	p := m.pair(c.Tenant, c.Model)
	addInt(p.input, c.Usage.InputTokens)
	addInt(p.output, c.Usage.OutputTokens)
	addInt(p.cacheCreation, c.Usage.CacheCreationInputTokens)
	addInt(p.cacheRead, c.Usage.CacheReadInputTokens)
	if c.Cost > 0 {
		p.cost.Add(c.Cost.USD())
	}
	if c.SavingsGross > 0 {
		p.savings.Add(c.SavingsGross.USD())
		p.savingsGross.Add(c.SavingsGross.USD())
	}
	if c.CachePenalty > 0 {
		p.cachePenalty.Add(c.CachePenalty.USD())
	}
	addInt(p.compactions, c.Compactions)
	if c.CompactionCost > 0 {
		p.compactionCost.Add(c.CompactionCost.USD())
	}
	addInt(p.webSearch, c.Usage.WebSearchRequests)
	for _, tr := range c.Transformations {
		m.transformations.WithLabelValues(m.TenantLabel(c.Tenant), transformationLabel(tr.Type), bindingReasonLabel(tr.Reason)).Inc()
	}
	if c.CompactionSavings > 0 {
		p.compactionSaved.Add(c.CompactionSavings.USD())
	}
	if c.PriceUnknown || len(c.Edits) > 0 || c.CacheMissedInputTokens > 0 {
		t := m.tenant(c.Tenant)
		if i := causeIndex(c.CacheMissCause); i >= 0 {
			addInt(t.cacheMissed[i], c.CacheMissedInputTokens)
		}
		if c.PriceUnknown {
			t.priceUnknown.Inc()
		}
		for _, e := range c.Edits {
			i := editIndex(e.Type)
			addInt(t.clearedInput[i], e.ClearedInputTokens)
			addInt(t.clearedToolUses[i], e.ClearedToolUses)
			addInt(t.clearedThinking[i], e.ClearedThinkingTurns)
		}
	}
}

// StreamOpened counts a streamed client request now being relayed; StreamClosed when it ends.
func (m *Metrics) StreamOpened(tenant string) { m.tenant(tenant).openStreams.Inc() }

// StreamClosed is the end of a stream counted by StreamOpened.
func (m *Metrics) StreamClosed(tenant string) { m.tenant(tenant).openStreams.Dec() }

// LedgerError counts a ledger record that could not be written.
func (m *Metrics) LedgerError() { m.ledgerErrors.Inc() }

// LedgerDropped counts a ledger record dropped because the queue was full.
func (m *Metrics) LedgerDropped() { m.ledgerDropped.Inc() }

// ShadowDropped counts a policy-lab call not made. candidate is a name from the tenant's
// policy (bounded by it).
func (m *Metrics) ShadowDropped(tenant, candidate string) {
	m.shadowDropped.WithLabelValues(m.TenantLabel(tenant), candidate).Inc()
}

// SetShadowCandidates starts the policy lab's counters of each tenant's
// candidates at zero, so a dashboard's rate() reads 0 rather than nothing
// before the first call is dropped or fails.
func (m *Metrics) SetShadowCandidates(candidates map[string][]string) {
	for tenant, names := range candidates {
		label := m.TenantLabel(tenant)
		for _, c := range names {
			m.shadowDropped.WithLabelValues(label, c)
			m.shadowErrors.WithLabelValues(label, c)
		}
	}
}

// ShadowError counts a policy-lab call that failed.
func (m *Metrics) ShadowError(tenant, candidate string) {
	m.shadowErrors.WithLabelValues(m.TenantLabel(tenant), candidate).Inc()
}

func addInt(c prometheus.Counter, n int64) {
	if n > 0 {
		c.Add(float64(n))
	}
}

// transformationLabel is an input_transformations type as a label: a documented one, or other.
func transformationLabel(t string) string {
	switch t {
	case "thinking_dropped", "thinking_mismatch_allowed":
		return t
	}
	return "other"
}

// bindingReasonLabel is an input_transformations reason as a label: a documented one, none when
// the entry had none, or other.
func bindingReasonLabel(r string) string {
	switch r {
	case "model_binding_mismatch", "prefix_binding_mismatch", "organization_binding_mismatch", "end_user_binding_mismatch":
		return r
	case "":
		return "none"
	}
	return "other"
}
