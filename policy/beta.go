package policy

import (
	"net/http"
	"strings"
)

// Betas is the set of betas a rewrite merges into anthropic-beta.
type Betas uint8

const (
	BetasContextManagement Betas = 1 << iota // BetaContextManagement
	BetasCompact                             // BetaCompact
)

// addedBetas are the only values ctxproxy ever adds to a request's anthropic-beta, by Betas bit,
// and each only when the outgoing body needs it. A test checks them against the pinned SDK's
// constants: none may be deprecated (the API refuses some once they went GA), and none is added
// for a request that does not use what it turns on. Values the client sent are the client's.
var addedBetas = [...]string{BetaContextManagement, BetaCompact}

// AddedBetas lists the values ctxproxy may add to anthropic-beta.
func AddedBetas() []string { return append([]string(nil), addedBetas[:]...) }

// Betas is what the rewrite merged into the headers: the context-management beta when the body
// ends up with context_management or the memory tool, the compaction beta with a compact edit.
func (i RewriteInfo) Betas() Betas {
	var bs Betas
	if i.NeedsBeta {
		bs |= BetasContextManagement
	}
	if i.Compact {
		bs |= BetasCompact
	}
	return bs
}

// Merge merges bs into h as Rewrite does, so a header built ahead of the body (a Lead's) is the
// one Rewrite would have made when the sets match. It reports whether the context-management
// beta was added.
func (bs Betas) Merge(h http.Header) (added bool) {
	for i, beta := range addedBetas {
		if bs&(1<<i) != 0 && MergeBeta(h, beta) && Betas(1<<i) == BetasContextManagement {
			added = true
		}
	}
	return added
}

// MergeBeta merges beta into h's anthropic-beta list: repeated header lines are folded into one
// comma-separated line, names are trimmed, empty items and duplicates dropped, the client's order
// kept and beta appended when missing. It reports whether beta was added.
func MergeBeta(h http.Header, beta string) bool {
	const key = "Anthropic-Beta"
	lines := h[key]
	nonCanonical := false
	for k := range h {
		if k != key && strings.EqualFold(k, key) {
			nonCanonical = true // set on the map directly rather than through Header.Add
		}
	}
	// Fast path: one line that already is a clean list containing beta.
	if len(lines) == 1 && !nonCanonical && clean(lines[0]) && hasItem(lines[0], beta) {
		return false
	}
	if nonCanonical {
		lines = append([]string(nil), lines...)
		for k, v := range h {
			if k != key && strings.EqualFold(k, key) {
				lines = append(lines, v...)
			}
		}
	}
	names := make([]string, 0, 8)
	for _, line := range lines {
		for item := range strings.SplitSeq(line, ",") {
			item = strings.TrimSpace(item)
			if item == "" || containsStr(names, item) {
				continue
			}
			names = append(names, item)
		}
	}
	added := !containsStr(names, beta)
	if added {
		names = append(names, beta)
	}
	if nonCanonical {
		for k := range h {
			if k != key && strings.EqualFold(k, key) {
				delete(h, k)
			}
		}
	}
	h[key] = []string{strings.Join(names, ",")}
	return added
}

// clean reports whether a list has no spaces, no empty items and no duplicates.
func clean(line string) bool {
	if line == "" || strings.ContainsAny(line, " \t") || strings.HasPrefix(line, ",") || strings.HasSuffix(line, ",") || strings.Contains(line, ",,") {
		return false
	}
	n := strings.Count(line, ",") + 1
	if n == 1 {
		return true
	}
	rest := line
	for range n {
		item, tail, _ := strings.Cut(rest, ",")
		if hasItem(tail, item) {
			return false
		}
		rest = tail
	}
	return true
}

func hasItem(line, item string) bool {
	for line != "" {
		var x string
		x, line, _ = strings.Cut(line, ",")
		if strings.TrimSpace(x) == item {
			return true
		}
	}
	return false
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
