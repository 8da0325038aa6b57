package policy

import (
	"crypto/subtle"

	"github.com/ctxproxy/ctxproxy/internal/apikey"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"gopkg.in/yaml.v3"
)

// history parses memory.history, the retention of memory versions.
func (ps *parser) history(n *yaml.Node, h *memoryhook.Retention) {
	if isNull(n) {
		return
	}
	ps.fields(n, "memory.history", []string{"keep_days", "keep_latest"}, func(key string, _, v *yaml.Node) {
		x, ok := ps.int(v, "memory.history."+key, 0)
		if !ok {
			return
		}
		x = min(x, 100000)
		switch key {
		case "keep_days":
			h.KeepDays = int(x)
		case "keep_latest":
			h.KeepLatest = int(x)
		}
	})
}

// OperatorToken finds the tenant whose operator_tokens_sha256 lists
// sha256(token), and the token's name (op-<first 8 hex of its sha256>).
func (s *Set) OperatorToken(token string) (p *Policy, name string, ok bool) {
	if token == "" {
		return nil, "", false
	}
	return s.OperatorTokenHash(apikey.Hash(token))
}

// OperatorTokenHash is OperatorToken by the token's sha256: a console
// session keeps only the hash, and finds its principal again by it on every
// request (so removing the token from the policy ends the session).
func (s *Set) OperatorTokenHash(h [32]byte) (p *Policy, name string, ok bool) {
	if s == nil {
		return nil, "", false
	}
	for _, t := range s.tenants {
		for _, k := range t.OperatorTokens {
			if subtle.ConstantTimeCompare(k[:], h[:]) == 1 {
				return t, "op-" + apikey.ID(h), true
			}
		}
	}
	return nil, "", false
}
