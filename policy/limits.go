package policy

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Period is a calendar bucket of a spend limit, in UTC.
type Period string

const (
	Daily   Period = "daily"   // YYYY-MM-DD
	Weekly  Period = "weekly"  // ISO week, YYYY-Www
	Monthly Period = "monthly" // YYYY-MM
)

// UserFromKind says where the end user of a request comes from.
type UserFromKind string

const (
	// UserFromKey: the 8-hex key id of the presented API key (default).
	UserFromKey UserFromKind = "key"
	// UserFromHeader: a request header the tenant names.
	UserFromHeader UserFromKind = "header"
	// UserFromMetadata: the body's metadata.user_id (Claude Code's embeds a session id).
	UserFromMetadata UserFromKind = "metadata.user_id"
)

// StoreErrorMode is what happens to a request when the counter store cannot be reached.
type StoreErrorMode string

const (
	// StoreErrorOpen serves the request unchecked (logged and counted).
	StoreErrorOpen StoreErrorMode = "open"
	// StoreErrorClosed refuses the request.
	StoreErrorClosed StoreErrorMode = "closed"
)

// DefaultReserveOutputTokens bounds the output tokens one admitted request holds in reservation
// when the policy does not say (limits.reserve_output_tokens).
const DefaultReserveOutputTokens = 4096

// MaxReserveOutputTokens is the most limits.reserve_output_tokens may say: more output tokens
// than any model answers in one call (the largest max_tokens a model takes is 128,000; 300,000
// for a batch with the output beta), and small enough that a hold at any listed price is an
// exact amount, far from int64's end.
const MaxReserveOutputTokens = 1_000_000

// Limits is the limits block of a policy: spend caps and per-minute rate limits.
// The zero value limits nothing.
type Limits struct {
	Spend                []SpendLimit // the tenant's caps
	PerUserSpend         []SpendLimit // each end user's caps within the tenant
	UserFrom             UserFromKind
	UserHeader           string // canonical header name, for UserFromHeader
	RequestsPerMinute    int64  // 0: no limit
	InputTokensPerMinute int64  // 0: no limit
	OnStoreError         StoreErrorMode
	// ReserveOutputTokens caps the output tokens (min with the request's max_tokens) an admitted
	// request reserves against the spend caps until its real cost is known.
	ReserveOutputTokens int64
}

// SpendLimit is one cap: USD per calendar period.
type SpendLimit struct {
	Period Period
	Nanos  int64  // the cap in nano-USD (tokens.Money)
	USD    string // as the policy writes it, for messages
}

// Capped reports whether the tenant has any spend cap.
func (l *Limits) Capped() bool { return len(l.Spend) > 0 || len(l.PerUserSpend) > 0 }

// RateLimited reports whether the tenant has a per-minute limit.
func (l *Limits) RateLimited() bool { return l.RequestsPerMinute > 0 || l.InputTokensPerMinute > 0 }

// Any reports whether the tenant has any limit at all.
func (l *Limits) Any() bool { return l.Capped() || l.RateLimited() }

// String is a one-line summary of the limits, for logs, the audit log of reloads and validate.
func (l *Limits) String() string {
	if !l.Any() {
		return "none"
	}
	var parts []string
	for _, s := range l.Spend {
		parts = append(parts, fmt.Sprintf("%s $%s", s.Period, s.USD))
	}
	for _, s := range l.PerUserSpend {
		parts = append(parts, fmt.Sprintf("per user %s $%s", s.Period, s.USD))
	}
	if len(l.PerUserSpend) > 0 {
		u := string(l.UserFrom)
		if l.UserFrom == UserFromHeader {
			u += ":" + l.UserHeader
		}
		parts = append(parts, "user from "+u)
	}
	if l.RequestsPerMinute > 0 {
		parts = append(parts, fmt.Sprintf("requests_per_minute %d", l.RequestsPerMinute))
	}
	if l.InputTokensPerMinute > 0 {
		parts = append(parts, fmt.Sprintf("input_tokens_per_minute %d", l.InputTokensPerMinute))
	}
	parts = append(parts, "on_store_error "+string(l.OnStoreError))
	if l.Capped() {
		parts = append(parts, fmt.Sprintf("reserve_output_tokens %d", l.ReserveOutputTokens))
	}
	return strings.Join(parts, ", ")
}

func defaultLimits() Limits {
	return Limits{UserFrom: UserFromKey, OnStoreError: StoreErrorOpen, ReserveOutputTokens: DefaultReserveOutputTokens}
}

// headerNameRe is an HTTP token (RFC 9110 field-name).
var headerNameRe = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

func (ps *parser) limits(n *yaml.Node, l *Limits) {
	if isNull(n) {
		return
	}
	known := []string{"spend", "per_user_spend", "user_from", "requests_per_minute", "input_tokens_per_minute", "on_store_error", "reserve_output_tokens"}
	ps.fields(n, "limits", known, func(key string, _, v *yaml.Node) {
		w := "limits." + key
		switch key {
		case "spend":
			l.Spend = ps.spendLimits(v, w)
		case "per_user_spend":
			l.PerUserSpend = ps.spendLimits(v, w)
		case "user_from":
			ps.userFrom(v, l)
		case "requests_per_minute":
			l.RequestsPerMinute, _ = ps.int(v, w, 1)
		case "input_tokens_per_minute":
			l.InputTokensPerMinute, _ = ps.int(v, w, 1)
		case "reserve_output_tokens":
			x, ok := ps.int(v, w, 1)
			switch {
			case ok && x > MaxReserveOutputTokens:
				ps.add(v.Line, "%s must be at most %d (no model answers more output tokens in one call), got %d", w, MaxReserveOutputTokens, x)
			case ok:
				l.ReserveOutputTokens = x
			}
		case "on_store_error":
			s, ok := ps.str(v, w)
			if !ok {
				return
			}
			switch m := StoreErrorMode(s); m {
			case StoreErrorOpen, StoreErrorClosed:
				l.OnStoreError = m
			default:
				ps.add(v.Line, "%s must be open or closed, got %q", w, s)
			}
		}
	})
}

func (ps *parser) userFrom(v *yaml.Node, l *Limits) {
	const w = "limits.user_from"
	s, ok := ps.str(v, w)
	if !ok {
		return
	}
	switch {
	case s == string(UserFromKey), s == string(UserFromMetadata):
		l.UserFrom = UserFromKind(s)
	case strings.HasPrefix(s, "header:"):
		name := strings.TrimSpace(strings.TrimPrefix(s, "header:"))
		if !headerNameRe.MatchString(name) {
			ps.add(v.Line, "%s: %q is not a valid header name", w, name)
			return
		}
		l.UserFrom, l.UserHeader = UserFromHeader, canonicalHeader(name)
	default:
		ps.add(v.Line, "%s must be key, header:<name> or metadata.user_id, got %q", w, s)
	}
}

// canonicalHeader is textproto's canonical form, without importing net/http into policy.
func canonicalHeader(s string) string {
	b := []byte(strings.ToLower(s))
	upper := true
	for i, c := range b {
		if upper && c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
		upper = c == '-'
	}
	return string(b)
}

func (ps *parser) spendLimits(n *yaml.Node, where string) []SpendLimit {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		ps.add(n.Line, "%s must be a list of {period: daily|weekly|monthly, usd: N}, got %s", where, describe(n))
		return nil
	}
	var out []SpendLimit
	seen := map[Period]int{}
	for i, item := range n.Content {
		item = resolve(item)
		w := fmt.Sprintf("%s[%d]", where, i)
		var s SpendLimit
		var periodNode, usdNode *yaml.Node
		if !ps.fields(item, w, []string{"period", "usd"}, func(key string, _, v *yaml.Node) {
			if key == "period" {
				periodNode = v
			} else {
				usdNode = v
			}
		}) {
			continue
		}
		ok := true
		if periodNode == nil {
			ps.add(item.Line, "%s needs a period: daily, weekly or monthly", w)
			ok = false
		} else if p, pok := ps.str(periodNode, w+".period"); pok {
			switch Period(p) {
			case Daily, Weekly, Monthly:
				s.Period = Period(p)
			default:
				ps.add(periodNode.Line, "%s.period must be daily, weekly or monthly, got %q", w, p)
				ok = false
			}
		} else {
			ok = false
		}
		if usdNode == nil {
			ps.add(item.Line, "%s needs usd: the cap in US dollars", w)
			ok = false
		} else if nanos, text, uok := ps.usd(usdNode, w+".usd"); uok {
			s.Nanos, s.USD = nanos, text
		} else {
			ok = false
		}
		if !ok {
			continue
		}
		if prev, dup := seen[s.Period]; dup {
			ps.add(item.Line, "%s: a %s cap is already set at line %d", w, s.Period, prev)
			continue
		}
		seen[s.Period] = item.Line
		out = append(out, s)
	}
	return out
}

// maxUSD keeps a cap in nano-USD far from int64 overflow when spend is added to it.
const maxUSD = 1_000_000_000

// usd reads a positive dollar amount with at most 9 decimals, exactly (no float).
func (ps *parser) usd(n *yaml.Node, where string) (int64, string, bool) {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
		ps.add(n.Line, "%s must be a number of US dollars, got %s", where, describe(n))
		return 0, "", false
	}
	whole, frac, _ := strings.Cut(n.Value, ".")
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || len(frac) > 9 || strings.Trim(frac, "0123456789") != "" || w > maxUSD || strings.HasPrefix(whole, "+") {
		ps.add(n.Line, "%s: %q is not an amount in dollars (at most 9 decimals, at most %d)", where, n.Value, maxUSD)
		return 0, "", false
	}
	f, _ := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
	nanos := w*1_000_000_000 + f
	if w < 0 || strings.HasPrefix(whole, "-") || nanos <= 0 {
		ps.add(n.Line, "%s must be greater than 0, got %s", where, n.Value)
		return 0, "", false
	}
	return nanos, n.Value, true
}
