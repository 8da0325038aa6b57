package policy

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// RefusedEdit reports which edit the tenant's policy added that the upstream's reply (status,
// body) refuses: today only clear_thinking_20251015, which the API refuses without thinking
// ("requires thinking"), and which ctxproxy writes under thinking type between_tools where the
// model's capabilities list it, though whether the API takes it there is unverified (the
// December 2026 API reference's between_tools section). The refusal is known precisely: a 400
// invalid_request_error without an error code whose message begins with the edit, as the API
// words it ("`clear_thinking_20251015` strategy requires `thinking` to be enabled or
// adaptive", as reported from the API), or with the edit's path in the request,
// context_management.edits.N, where N is where the rewrite put it, as the fake words it. Any
// other reply, and a clear_thinking the client sent itself, is not ctxproxy's to take back.
func RefusedEdit(info *RewriteInfo, status int, body []byte) (string, bool) {
	if status != http.StatusBadRequest || !info.ClearThinkingAdded {
		return "", false
	}
	e := gjson.GetBytes(body, "error")
	if gjson.GetBytes(body, "type").Str != "error" || e.Get("type").Str != "invalid_request_error" {
		return "", false
	}
	if c := e.Get("details.error_code"); c.Exists() && c.Type != gjson.Null {
		return "", false // a coded refusal is another one (the API reference's error codes)
	}
	msg := strings.ReplaceAll(e.Get("message").Str, "`", "")
	if rest, ok := strings.CutPrefix(msg, "context_management.edits."); ok {
		i := strings.IndexByte(rest, ':')
		if i < 0 {
			return "", false
		}
		n, err := strconv.Atoi(rest[:i])
		if err != nil || n < 0 || n >= len(info.Edits) || info.Edits[n] != EditClearThinking {
			return "", false
		}
		msg = strings.TrimLeft(rest[i+1:], " ")
	}
	rest, ok := strings.CutPrefix(msg, EditClearThinking+" ")
	if !ok {
		return "", false
	}
	if _, after, ok := strings.Cut(rest, "requires "); !ok || !strings.Contains(after, "thinking") {
		return "", false
	}
	return EditClearThinking, true
}

// WithoutEdit is body, a request the tenant's policy rewrote (info, its header h), without the
// edit of type typ that the policy added (RefusedEdit): the edit leaves context_management.edits,
// context_management goes when it held nothing else, and so does the context-management beta
// when the rewrite added it and the body no longer needs it. info follows. body is not changed.
func WithoutEdit(body []byte, info *RewriteInfo, h http.Header, typ string) ([]byte, error) {
	edits := gjson.GetBytes(body, "context_management.edits")
	if !edits.IsArray() {
		return nil, fmt.Errorf("drop %s: the request has no context_management.edits", typ)
	}
	var kept []string
	var types []string
	found := false
	edits.ForEach(func(_, e gjson.Result) bool {
		if t := e.Get("type").Str; t == typ && !found {
			found = true
		} else {
			kept = append(kept, e.Raw)
			types = append(types, t)
		}
		return true
	})
	if !found {
		return nil, fmt.Errorf("drop %s: not among the request's edits", typ)
	}
	var out []byte
	var err error
	switch {
	case len(kept) > 0:
		out, err = sjson.SetRawBytes(body, "context_management.edits", []byte("["+strings.Join(kept, ",")+"]"))
	case onlyKey(gjson.GetBytes(body, "context_management"), "edits"):
		out, err = sjson.DeleteBytes(body, "context_management")
	default:
		out, err = sjson.SetRawBytes(body, "context_management.edits", []byte("[]"))
	}
	if err != nil {
		return nil, fmt.Errorf("drop %s: %w", typ, err)
	}
	info.Edits = types
	if typ == EditClearThinking {
		info.ClearThinkingAdded = false
	}
	info.NeedsBeta = gjson.GetBytes(out, "context_management").Exists() || info.MemoryAdded || info.MemoryDeclared
	if info.BetaAdded && !info.NeedsBeta {
		info.BetaAdded = false
		dropBeta(h, BetaContextManagement)
	}
	return out, nil
}

// dropBeta takes beta out of h's anthropic-beta list (folded into one line by MergeBeta). The
// header's value is replaced, never written in place: requests already sent share it.
func dropBeta(h http.Header, beta string) {
	const key = "Anthropic-Beta"
	var names []string
	for _, line := range h[key] {
		for item := range strings.SplitSeq(line, ",") {
			if item = strings.TrimSpace(item); item != "" && item != beta {
				names = append(names, item)
			}
		}
	}
	if len(names) == 0 {
		delete(h, key)
		return
	}
	h[key] = []string{strings.Join(names, ",")}
}
