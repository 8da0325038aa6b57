package limits

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// Refusal is a request over a limit: the proxy answers Status with the API's error shape
// ({"type":"error","error":{"type":Type,"message":Message}}) and Header.
type Refusal struct {
	Status  int
	Type    string // billing_error or rate_limit_error
	Message string // names the limit as the policy writes it and when it resets; never the key
	Limit   string // daily, weekly, monthly, requests_per_minute, input_tokens_per_minute, store
	Header  http.Header
}

// retryHeld is the retry-after of a request refused because requests in flight hold the rest of
// a cap: their holds go when they finish, in seconds for most.
const retryHeld = 5 * time.Second

// checkRate charges the request to the tenant's per-minute limits.
// A batch counts each of its requests; what is more than a minute's allowance takes the whole
// allowance (RateStore.Take), so a batch larger than the limit passes when the allowance is full
// rather than never.
func (e *Enforcer) checkRate(ctx context.Context, tenant string, l *policy.Limits, requests, input int64) *Refusal {
	checks := [...]struct {
		name  string
		limit int64
		cost  int64
	}{
		{"requests_per_minute", l.RequestsPerMinute, requests},
		{"input_tokens_per_minute", l.InputTokensPerMinute, input},
	}
	var takes [len(checks)]rateTake
	for i, c := range checks {
		if c.limit > 0 {
			takes[i] = rateTake{key: e.rateKey(tenant, c.name, c.limit), perMinute: c.limit, cost: max(c.cost, 1)}
		}
	}
	if m, ok := e.cfg.Rate.(*MemoryRate); ok {
		// It never fails: its takes share one lock and one clock reading.
		if i, retry := m.takeAll(takes[:]); i >= 0 {
			return e.refuseRate(tenant, checks[i].name, checks[i].limit, retry)
		}
		return nil
	}
	for i, t := range takes {
		if t.perMinute <= 0 {
			continue
		}
		ok, retry, err := e.cfg.Rate.Take(ctx, t.key, t.perMinute, t.cost)
		if err != nil {
			pol := &policy.Policy{Tenant: tenant, Limits: *l}
			if ref := e.storeError(pol, checks[i].name, err); ref != nil {
				return ref
			}
			continue
		}
		if !ok {
			return e.refuseRate(tenant, checks[i].name, checks[i].limit, retry)
		}
	}
	return nil
}

// refuseRate is the answer to a request over its tenant's per-minute limit name.
func (e *Enforcer) refuseRate(tenant, name string, limit int64, retry time.Duration) *Refusal {
	e.cfg.Metrics.refused(tenant, name)
	secs := retrySeconds(retry)
	h := http.Header{}
	h.Set("Retry-After", strconv.FormatInt(secs, 10))
	return &Refusal{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Limit: name, Header: h,
		Message: fmt.Sprintf("tenant %s is over its %s limit of %d; retry in %ds", tenant, name, limit, secs)}
}

// rateKey is the limiter's key of a tenant's per-minute limit. {tenant} is a Redis Cluster
// hash tag: one tenant's keys live on one shard. The limit is part of the key, so a reload that
// changes it starts the new limit with a full allowance instead of draining the old limit's
// state first. Kept once made: every request of a limited tenant asks for its keys.
func (e *Enforcer) rateKey(tenant, name string, limit int64) string {
	k := rateKeyOf{tenant, name, limit}
	if v, ok := e.rateKeys.Load(k); ok {
		return v.(string)
	}
	key := "ctxproxy:{" + tenant + "}:" + name + ":" + strconv.FormatInt(limit, 10)
	e.rateKeys.Store(k, key)
	return key
}

type rateKeyOf struct {
	tenant, name string
	limit        int64
}

// refuseSpend is the answer to a request whose reservation does not fit under counter i: a
// billing_error until the period resets when the settled spend itself leaves no room, else a
// rate_limit_error: requests in flight hold the rest, and their holds go when they finish.
func (e *Enforcer) refuseSpend(pol *policy.Policy, ss []standing, res Reservation, i int, amount tokens.Money, what string, now time.Time) *Refusal {
	s := &ss[i]
	name := string(s.limit.Period)
	who := "tenant " + pol.Tenant + "'s " + name
	if s.perUser {
		who = "tenant " + pol.Tenant + "'s per-user " + name
	}
	reset := s.reset.Format(time.RFC3339)
	h := http.Header{}
	e.cfg.Metrics.observeStanding(pol.Tenant, ss)
	if s.spent+amount <= s.cap {
		e.cfg.Metrics.refused(pol.Tenant, name+"_held")
		h.Set("Retry-After", strconv.FormatInt(retrySeconds(retryHeld), 10))
		return &Refusal{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Limit: name, Header: h,
			Message: fmt.Sprintf("%s spend limit of $%s is held by requests in flight ($%s spent, $%s reserved, %s may cost up to $%s); retry shortly",
				who, s.limit.USD, s.spent.String(), res.Reserved[i].String(), what, amount.String())}
	}
	e.cfg.Metrics.refused(pol.Tenant, name)
	s.exceeded = true // this request cannot fit before the reset
	var u unified
	unifiedHeaders(&u, s, now, "org_spend_cap_reached")
	u.put(h)
	h.Set(HeaderShouldRetry, "false")
	return &Refusal{Status: http.StatusTooManyRequests, Type: "billing_error", Limit: name, Header: h,
		Message: fmt.Sprintf("%s spend limit of $%s is reached ($%s spent, %s may cost up to $%s); it resets at %s",
			who, s.limit.USD, s.spent.String(), what, amount.String(), reset)}
}

// storeRefusal answers a request of a fail-closed tenant when the counter store cannot be read.
func storeRefusal(pol *policy.Policy, now time.Time) *Refusal {
	h := http.Header{}
	h.Set(HeaderStatus, "rejected")
	h.Set(HeaderOverReason, "fetch_error")
	h.Set(HeaderShouldRetry, "false")
	h.Set("Retry-After", "60")
	return &Refusal{Status: http.StatusTooManyRequests, Type: "billing_error", Limit: "store", Header: h,
		Message: "spend limit unavailable: the limits store cannot be reached and tenant " + pol.Tenant + " fails closed (on_store_error: closed)"}
}
