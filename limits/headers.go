package limits

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// Header names of Claude Code's gateway protocol (the API reference's Claude Code gateway
// section). Claude Code reads them to show a user their cap; the values follow what Claude
// Code's own gateway sends.
const (
	hUnified          = "Anthropic-Ratelimit-Unified-"
	HeaderStatus      = hUnified + "Status"
	HeaderReset       = hUnified + "Reset"
	HeaderClaim       = hUnified + "Representative-Claim"
	HeaderOverStatus  = hUnified + "Overage-Status"
	HeaderOverUtil    = hUnified + "Overage-Utilization"
	HeaderOverReset   = hUnified + "Overage-Reset"
	HeaderOverThresh  = hUnified + "Overage-Surpassed-Threshold"
	HeaderOverPeriod  = hUnified + "Overage-Period"
	HeaderOverReason  = hUnified + "Overage-Disabled-Reason"
	HeaderShouldRetry = "X-Should-Retry"

	// ratelimitPrefix is the upstream's organisation-wide headers' prefix (canonical form).
	ratelimitPrefix = "Anthropic-Ratelimit-"
)

// thresholds are the utilisations Claude Code warns at, highest first.
var thresholds = []float64{0.95, 0.75}

// standing is one spend counter as a request found it.
type standing struct {
	limit    policy.SpendLimit
	perUser  bool
	spent    tokens.Money
	cap      tokens.Money
	reset    time.Time
	exceeded bool // spent has reached the cap
}

func (s *standing) utilization() float64 {
	if s.cap <= 0 {
		return 1
	}
	return float64(s.spent) / float64(s.cap)
}

// binding picks the counter the headers describe, as Claude Code's gateway does: an exceeded one
// over one that is not; of two exceeded, the one that resets later; else the most used.
func binding(ss []standing) *standing {
	var b *standing
	for i := range ss {
		s := &ss[i]
		switch {
		case b == nil:
			b = s
		case b.exceeded != s.exceeded:
			if s.exceeded {
				b = s
			}
		case s.exceeded:
			if s.reset.After(b.reset) {
				b = s
			}
		case s.utilization() > b.utilization():
			b = s
		}
	}
	return b
}

// shownUtilization is the utilisation rounded to hundredths, below 1 until the cap is reached.
func (s *standing) shownUtilization() float64 {
	u := float64(int64(s.utilization()*100+0.5)) / 100
	if !s.exceeded {
		u = min(u, 0.99)
	}
	return u
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// unified is a reply's unified headers as unifiedHeaders wrote them: in a ticket, they cost
// no allocation of their own (every admitted request of a capped tenant carries them).
type unified struct {
	n     int
	names [8]string
	vals  [8]string
}

func (u *unified) set(k, v string) {
	u.names[u.n], u.vals[u.n] = k, v
	u.n++
}

// put writes the headers into h. The names are canonical already, and every value is a slice
// of one array: h.Set would canonicalise each name again and make a slice per value.
func (u *unified) put(h http.Header) {
	for i := range u.n {
		h[u.names[i]] = u.vals[i : i+1 : i+1]
	}
}

// unifiedHeaders writes the anthropic-ratelimit-unified-* headers for s into u. reason is the
// overage-disabled-reason of a refusal (org_spend_cap_reached, or fetch_error when the store is
// unreachable and the tenant fails closed).
func unifiedHeaders(u *unified, s *standing, now time.Time, reason string) {
	reset := strconv.FormatInt(s.reset.Unix(), 10)
	status := "allowed"
	var surpassed string
	if s.exceeded {
		status, surpassed = "rejected", "1"
	} else {
		for _, t := range thresholds {
			if s.utilization() > t {
				status, surpassed = "allowed_warning", formatFloat(t)
				break
			}
		}
	}
	u.set(HeaderStatus, status)
	u.set(HeaderReset, reset)
	u.set(HeaderOverReset, reset)
	u.set(HeaderOverUtil, formatFloat(s.shownUtilization()))
	if surpassed != "" {
		u.set(HeaderOverThresh, surpassed)
	}
	if !s.exceeded {
		u.set(HeaderClaim, "overage")
		u.set(HeaderOverStatus, status)
		return
	}
	u.set(HeaderOverPeriod, string(s.limit.Period))
	u.set(HeaderOverReason, reason)
	u.set("Retry-After", strconv.FormatInt(retrySeconds(s.reset.Sub(now)), 10))
}

// retrySeconds rounds d up to whole seconds, at least 1.
func retrySeconds(d time.Duration) int64 {
	return max(1, int64((d+time.Second-1)/time.Second))
}

// HideUpstreamRatelimit removes the upstream's anthropic-ratelimit-* headers from h, a response to
// pol's tenant, when that tenant has a spend cap: they describe the organisation's quota, and its
// client (Claude Code) would show them as its user's cap, which the unified headers describe. A
// tenant with per-minute limits only, or none, keeps them. The one rule for every route: Messages,
// count_tokens, batches and pass-through alike.
func HideUpstreamRatelimit(pol *policy.Policy, h http.Header) {
	if pol == nil || !pol.Limits.Capped() {
		return
	}
	for k := range h {
		if len(k) >= len(ratelimitPrefix) && strings.EqualFold(k[:len(ratelimitPrefix)], ratelimitPrefix) {
			delete(h, k)
		}
	}
}
