package memapi

import (
	"context"
	"fmt"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
)

// A tenant with memory per user: each user's store is listed to the
// tenant's operators under the user's name, never to another tenant's,
// addressed by its id or as memstore_<tenant>~<user>, and purged alone.
func TestUserStores(t *testing.T) {
	ctx := context.Background()
	const acme = "tenant: acme\noperator_tokens_sha256: [%s]\nmemory:\n  mode: proxy\n  scopes:\n" +
		"    - {path: /memories/team, store: tenant, model_access: read}\n    - {path: /memories, store: user}\n"
	users := func(_ context.Context, tenant string) ([]string, error) {
		if tenant == "acme" {
			return []string{"ana", "bo"}, nil
		}
		return nil, nil
	}
	f := newFixtureWith(t, nil, map[string]string{"acme.yaml": fmt.Sprintf(acme, hash(acmeOp))}, users)
	for _, u := range []string{"ana", "bo"} {
		sc := memoryhook.Scope{Tenant: policy.UserStore("acme", u), Actor: memoryhook.Actor{Type: memoryhook.ActorModel}}
		if r := memoryhook.Exec(ctx, f.st, sc, []byte(`{"command":"create","path":"/memories/notes.md","file_text":"`+u+`'s"}`)); r.IsError {
			t.Fatal(r.Content)
		}
	}
	if got := f.ok(acmeOp, "GET", "/v1/memory_stores", "").Get("data.#.name").Raw; got != `["acme","ana","bo"]` && got != `["acme","bo","ana"]` {
		t.Errorf("stores listed to acme: %s", got)
	}
	if got := f.ok(globexOp, "GET", "/v1/memory_stores", "").Get("data.#.name").Raw; got != `["globex"]` {
		t.Errorf("stores listed to globex: %s", got)
	}
	anaID := "memstore_" + policy.UserStore("acme", "ana")
	for _, id := range []string{anaID, "memstore_acme~ana"} {
		if got := f.ok(acmeOp, "GET", "/v1/memory_stores/"+id+"/memories?view=full", "").Get("data.#.content").Raw; got != `["ana's"]` {
			t.Errorf("%s: %s", id, got)
		}
		if st, _ := f.do(globexOp, "GET", "/v1/memory_stores/"+id+"/memories", ""); st != 404 {
			t.Errorf("globex reads %s: %d", id, st)
		}
	}
	f.ok(acmeOp, "POST", "/v1/memory_stores/"+anaID+"/purge", `{"confirm":"`+anaID+`"}`)
	if got := f.ok(acmeOp, "GET", "/v1/memory_stores", "").Get("data.#.name").Raw; got != `["acme","bo"]` {
		t.Errorf("after purging ana: %s", got)
	}
	if got := gjson.Get(f.ok(acmeOp, "GET", "/v1/memory_stores/memstore_acme~bo/memories?view=full", "").Raw, "data.#.content").Raw; got != `["bo's"]` {
		t.Errorf("bo's after purging ana: %s", got)
	}
}
