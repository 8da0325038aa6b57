package capabilities

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/upstreamreq"
)

// Bounds on one read: a models list is a few hundred kilobytes at most.
const (
	pageLimit   = "1000" // the most the endpoint gives per page
	maxPages    = 20
	maxPageSize = 8 << 20
	apiVersion  = "2023-06-01"
)

// StatusError is a models read the upstream refused.
type StatusError struct {
	Status int
	Type   string // error.type of the answer, when it had one
}

func (e *StatusError) Error() string {
	if e.Type != "" {
		return fmt.Sprintf("GET /v1/models: %d %s", e.Status, e.Type)
	}
	return fmt.Sprintf("GET /v1/models: %d", e.Status)
}

// rejected reports whether err says the credential itself is not taken
// (401, 403): another one may be.
func rejected(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && (se.Status == http.StatusUnauthorized || se.Status == http.StatusForbidden)
}

// readModels lists every model the credential sees, retired ones included
// (the endpoint leaves them out unless asked), page by page. No beta header
// goes with it: none is needed for capabilities, and the beta-only keys
// (capabilities.compaction) are not what ctxproxy decides from.
func readModels(ctx context.Context, client *http.Client, base *url.URL, cred upstreamreq.Credential) ([]Model, error) {
	var out []Model
	after := ""
	for range maxPages {
		q := url.Values{"limit": {pageLimit}, "lifecycle": {Active, Deprecated, Retired}}
		if after != "" {
			q.Set("after_id", after)
		}
		page, err := get(ctx, client, base, "/v1/models", q, cred)
		if err != nil {
			return nil, err
		}
		if !gjson.ValidBytes(page) {
			return nil, errors.New("GET /v1/models: the answer is not JSON")
		}
		data := gjson.GetBytes(page, "data")
		if !data.IsArray() {
			return nil, errors.New("GET /v1/models: the answer has no data array")
		}
		for _, m := range data.Array() {
			if mm, ok := parseModel(m); ok {
				out = append(out, mm)
			}
		}
		last := gjson.GetBytes(page, "last_id").Str
		if !gjson.GetBytes(page, "has_more").Bool() || last == "" || last == after {
			return out, nil
		}
		after = last
	}
	return nil, fmt.Errorf("GET /v1/models: more than %d pages", maxPages)
}

// get reads one answer of the models endpoint.
func get(ctx context.Context, client *http.Client, base *url.URL, path string, q url.Values, cred upstreamreq.Credential) ([]byte, error) {
	u := upstreamreq.URL(base, path)
	u.RawQuery = q.Encode()
	h := upstreamreq.Own(cred)
	h.Set("Anthropic-Version", apiVersion)
	h.Set("Accept", "application/json")
	resp, err := client.Do(upstreamreq.New(ctx, http.MethodGet, u, h, 0, nil))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxPageSize+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: read the answer: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &StatusError{Status: resp.StatusCode, Type: gjson.GetBytes(b, "error.type").Str}
	}
	if len(b) > maxPageSize {
		return nil, fmt.Errorf("GET %s: the answer is over %d bytes", path, maxPageSize)
	}
	return b, nil
}

// parseModel reads one model object. Every field may be null or absent (the
// SDKs disagree on which are nullable); a null or missing capability is
// Unknown, never No.
func parseModel(m gjson.Result) (Model, bool) {
	id := m.Get("id")
	if id.Type != gjson.String || id.Str == "" {
		return Model{}, false
	}
	out := Model{ID: id.Str, Lifecycle: m.Get("lifecycle").Str, RetiresAt: m.Get("retires_at").Str}
	if n := m.Get("max_input_tokens"); n.Type == gjson.Number {
		out.MaxInputTokens = n.Int()
	}
	caps := m.Get("capabilities")
	if !caps.IsObject() {
		return out, true
	}
	cm := caps.Get("context_management")
	switch cmOn := supported(cm); cmOn {
	case No:
		out.ClearThinking, out.ClearToolUses, out.Compact = No, No, No
	default:
		out.ClearThinking = supported(cm.Get("clear_thinking_20251015"))
		out.ClearToolUses = supported(cm.Get("clear_tool_uses_20250919"))
		out.Compact = supported(cm.Get("compact_20260112"))
	}
	out.BetweenTools = supported(caps.Get("thinking.types.between_tools"))
	return out, true
}

// supported reads a {"supported": bool} leaf.
func supported(v gjson.Result) Support {
	if !v.IsObject() {
		return Unknown
	}
	switch v.Get("supported").Type {
	case gjson.True:
		return Yes
	case gjson.False:
		return No
	}
	return Unknown
}

// resolveNamed asks GET /v1/models/{name} for each named model the list does
// not find (an alias such as claude-sonnet-4-0 for claude-sonnet-4-20250514):
// aliases maps it to the id answered, which is added to models when the list
// lacks it. A name the endpoint does not know stays unknown.
func resolveNamed(ctx context.Context, client *http.Client, base *url.URL, cred upstreamreq.Credential, models []Model, named []string) ([]Model, map[string]string) {
	t := newTable(models)
	var aliases map[string]string
	for _, name := range named {
		if _, ok := t.lookup(name); ok || name == "" || strings.ContainsAny(name, "/?#%") {
			continue
		}
		if _, done := aliases[name]; done {
			continue
		}
		b, err := get(ctx, client, base, "/v1/models/"+name, nil, cred)
		if err != nil || !gjson.ValidBytes(b) {
			continue
		}
		m, ok := parseModel(gjson.ParseBytes(b))
		if !ok {
			continue
		}
		if aliases == nil {
			aliases = map[string]string{}
		}
		aliases[name] = m.ID
		if _, listed := t.byName[m.ID]; !listed {
			models = append(models, m)
			t = newTable(models)
		}
	}
	return models, aliases
}
