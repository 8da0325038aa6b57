package proxy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/internal/pgtest"
	"github.com/ctxproxy/ctxproxy/keys"
	"github.com/ctxproxy/ctxproxy/limits"
)

// Two replicas on one limits store count a user's memory writes against one allowance
// (memory.gate.max_writes_per_minute); replicas without a shared store count apart.
func TestTheMemoryGateCountsAUsersWritesAcrossReplicas(t *testing.T) {
	pols := scopedVault(t)
	pols["vault.yaml"] = strings.Replace(pols["vault.yaml"], "max_writes_per_minute: 60", "max_writes_per_minute: 2", 1)
	db := pgtest.New(t, "proxy_gate_rate")
	for _, shared := range []bool{true, false} {
		t.Run(fmt.Sprintf("shared store %v", shared), func(t *testing.T) {
			ctx := context.Background()
			ks, err := keys.OpenFileStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			ring := keys.NewKeyring(ks)
			_, ana, _ := ring.Create(ctx, keys.Spec{Tenant: "vault", Name: "laptop", User: fmt.Sprintf("ana-%v", shared)})
			replica := func() *harness {
				rate := limits.RateStore(limits.NewMemoryRate())
				if shared {
					s, err := limits.OpenPGStore(ctx, db.URL)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(s.Close)
					rate = s.Rate()
				}
				e := limits.New(limits.Config{Spend: limits.NewMemoryStore(), Rate: rate})
				return newHarnessWith(t, nil, pols, func(c *Config) { c.Keys, c.Limits = ring, e })
			}
			write := func(h *harness, name string) gjson.Result {
				t.Helper()
				h.fake.Reset()
				h.fake.SetResponder(fakeapi.Script(fakeapi.Blocks(fakeapi.MemoryCreate("/memories/"+name, "x\n")), fakeapi.Blocks(fakeapi.Text("done"))))
				resp := h.post("/v1/messages", ana, simpleBody)
				if b := readAll(t, resp.Body); resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, b)
				}
				return gjson.GetBytes(h.fake.Requests()[1].Body, "messages.@reverse.0.content.0")
			}
			a, b := replica(), replica()
			for i, h := range []*harness{a, b} {
				if r := write(h, fmt.Sprintf("%d.md", i)); r.Get("is_error").Bool() {
					t.Fatalf("write %d refused: %s", i+1, r.Raw)
				}
			}
			r := write(b, "2.md")
			refused := r.Get("is_error").Bool() && r.Get("content").Str == "Error: Memory write refused: this user's memory takes at most 2 writes a minute; wait a minute, then write again."
			if refused != shared {
				t.Errorf("the third write (the second on this replica): refused %v, want %v: %s", refused, shared, r.Raw)
			}
		})
	}
}
