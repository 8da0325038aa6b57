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

// thresholds are the utilisations Claude Code warns at, highest first, and their header text.
var thresholds = []struct {
	at   float64
	text string
}{{0.95, formatFloat(0.95)}, {0.75, formatFloat(0.75)}}

// hundredths is the text of each utilisation 0, 0.01, … 1 as formatFloat writes it: a reply's
// utilisation is one of them unless it is past its cap, and is then written without an
// allocation.
var hundredths = func() (t [101]string) {
	for i := range t {
		t[i] = formatFloat(float64(i) / 100)
	}
	return t
}()

// standing is one spend counter as a request found it.
type standing struct {
	limit     policy.SpendLimit
	perUser   bool
	spent     tokens.Money
	cap       tokens.Money
	reset     time.Time
	resetText string // reset in Unix seconds, as the headers write it
	exceeded  bool   // spent has reached the cap
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

// shownUtilization is the utilisation rounded to hundredths, below 1 until the cap is reached,
// as the header writes it.
func (s *standing) shownUtilization() string {
	n := int64(s.utilization()*100 + 0.5)
	if !s.exceeded {
		n = min(n, 99)
	}
	if n >= 0 && n < int64(len(hundredths)) {
		return hundredths[n]
	}
	return formatFloat(float64(n) / 100)
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// unified is a reply's unified headers as unifiedHeaders wrote them: in a ticket, they cost
// no allocation of their own (every admitted request of a capped tenant carries them). A name
// is its index in unifiedNames: a byte rather than a string keeps the ticket small.
type unified struct {
	n     int
	names [8]uint8
	vals  [8]string
}

// The names unifiedHeaders writes, in canonical form (see put), by their index.
const (
	nStatus uint8 = iota
	nReset
	nOverReset
	nOverUtil
	nOverThresh
	nClaim
	nOverStatus
	nOverPeriod
	nOverReason
	nRetryAfter
)

var unifiedNames = [...]string{nStatus: HeaderStatus, nReset: HeaderReset, nOverReset: HeaderOverReset,
	nOverUtil: HeaderOverUtil, nOverThresh: HeaderOverThresh, nClaim: HeaderClaim, nOverStatus: HeaderOverStatus,
	nOverPeriod: HeaderOverPeriod, nOverReason: HeaderOverReason, nRetryAfter: "Retry-After"}

func (u *unified) set(name uint8, v string) {
	u.names[u.n], u.vals[u.n] = name, v
	u.n++
}

// put writes the headers into h. The names are canonical already, and every value is a slice
// of one array: h.Set would canonicalise each name again and make a slice per value.
func (u *unified) put(h http.Header) {
	for i := range u.n {
		h[unifiedNames[u.names[i]]] = u.vals[i : i+1 : i+1]
	}
}

// unifiedHeaders writes the anthropic-ratelimit-unified-* headers for s into u. reason is the
// overage-disabled-reason of a refusal (org_spend_cap_reached, or fetch_error when the store is
// unreachable and the tenant fails closed).
func unifiedHeaders(u *unified, s *standing, now time.Time, reason string) {
	reset := s.resetText
	status := "allowed"
	var surpassed string
	if s.exceeded {
		status, surpassed = "rejected", "1"
	} else {
		for _, t := range thresholds {
			if s.utilization() > t.at {
				status, surpassed = "allowed_warning", t.text
				break
			}
		}
	}
	u.set(nStatus, status)
	u.set(nReset, reset)
	u.set(nOverReset, reset)
	u.set(nOverUtil, s.shownUtilization())
	if surpassed != "" {
		u.set(nOverThresh, surpassed)
	}
	if !s.exceeded {
		u.set(nClaim, "overage")
		u.set(nOverStatus, status)
		return
	}
	u.set(nOverPeriod, string(s.limit.Period))
	u.set(nOverReason, reason)
	u.set(nRetryAfter, strconv.FormatInt(retrySeconds(s.reset.Sub(now)), 10))
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
