package limits

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctxproxy/ctxproxy/policy"
)

// Metrics are the limits' Prometheus series. Labels are bounded: tenants come from the policies,
// periods and limit names are fixed sets. A nil *Metrics records nothing.
type Metrics struct {
	spend       *prometheus.GaugeVec
	cap         *prometheus.GaugeVec
	utilization *prometheus.GaugeVec
	refusals    *prometheus.CounterVec
	storeErrs   *prometheus.CounterVec
	settleFails *prometheus.CounterVec

	// The gauges of each tenant and period, looked up once: every admission of a capped
	// tenant sets three a period.
	mu       sync.RWMutex
	standing map[standingKey]*standingGauges
}

type standingKey struct {
	tenant string
	period policy.Period
}

type standingGauges struct{ spend, cap, utilization prometheus.Gauge }

// NewMetrics registers the series in reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		spend: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ctxproxy_limit_spend_usd",
			Help: "Settled spend of the tenant in the current period, as the last request found it."}, []string{"tenant", "period"}),
		cap: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ctxproxy_limit_cap_usd",
			Help: "The tenant's spend cap per period."}, []string{"tenant", "period"}),
		utilization: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ctxproxy_limit_utilization",
			Help: "The tenant's spend over its cap (0..1+) as the last request found it."}, []string{"tenant", "period"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ctxproxy_limit_refusals_total",
			Help: "Requests refused by a limit (daily, weekly, monthly, *_held when requests in flight hold the rest, requests_per_minute, input_tokens_per_minute, store)."}, []string{"tenant", "limit"}),
		storeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ctxproxy_limit_store_errors_total",
			Help: "Checks the limits store could not answer, by outcome (served_unchecked with on_store_error open, refused with closed)."}, []string{"tenant", "outcome"}),
		settleFails: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ctxproxy_limit_settle_errors_total",
			Help: "Request costs that could not be added to the spend counters."}, []string{"tenant"}),
		standing: map[standingKey]*standingGauges{},
	}
	reg.MustRegister(m.spend, m.cap, m.utilization, m.refusals, m.storeErrs, m.settleFails)
	return m
}

func (m *Metrics) observeStanding(tenant string, ss []standing) {
	if m == nil {
		return
	}
	// Per-user standings are not series: users are unbounded. The report shows them.
	for i := range ss {
		s := &ss[i]
		if s.perUser {
			continue
		}
		g := m.gauges(tenant, s.limit.Period)
		g.spend.Set(s.spent.USD())
		g.cap.Set(s.cap.USD())
		g.utilization.Set(s.utilization())
	}
}

// gauges are the standing gauges of tenant's period.
func (m *Metrics) gauges(tenant string, p policy.Period) *standingGauges {
	k := standingKey{tenant, p}
	m.mu.RLock()
	g := m.standing[k]
	m.mu.RUnlock()
	if g != nil {
		return g
	}
	l := []string{tenant, string(p)}
	g = &standingGauges{m.spend.WithLabelValues(l...), m.cap.WithLabelValues(l...), m.utilization.WithLabelValues(l...)}
	m.mu.Lock()
	m.standing[k] = g
	m.mu.Unlock()
	return g
}

func (m *Metrics) refused(tenant, limit string) {
	if m != nil {
		m.refusals.WithLabelValues(tenant, limit).Inc()
	}
}

func (m *Metrics) unchecked(tenant string, closed bool) {
	if m == nil {
		return
	}
	outcome := "served_unchecked"
	if closed {
		outcome = "refused"
		m.refusals.WithLabelValues(tenant, "store").Inc()
	}
	m.storeErrs.WithLabelValues(tenant, outcome).Inc()
}

func (m *Metrics) settleFailed(tenant string) {
	if m != nil {
		m.settleFails.WithLabelValues(tenant).Inc()
	}
}
