package proxy

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

const keyCapped = "sk-ant-proxy-test-capped"

// capsHarness is a proxy whose tenant "capped" runs memory in the proxy under a $1 daily cap
// and a $1 daily per-user cap (user from x-end-user), priced at $1/M input, $10/M output.
func capsHarness(t *testing.T) (*harness, *limits.MemoryStore) {
	t.Helper()
	prices, err := tokens.ParsePrices([]byte("models:\n  - model: m\n    input: 1\n    output: 10\n    cache_write: 1.25\n    cache_read: 0.1\n"))
	if err != nil {
		t.Fatal(err)
	}
	store := limits.NewMemoryStore()
	e := limits.New(limits.Config{Spend: store, Rate: limits.NewMemoryRate(), Prices: prices})
	pols := map[string]string{"capped.yaml": "tenant: capped\napi_keys_sha256: [\"" + sha(keyCapped) + "\"]\nmemory:\n  mode: proxy\n" +
		"limits:\n  spend: [{period: daily, usd: 1}]\n  per_user_spend: [{period: daily, usd: 1}]\n  user_from: header:x-end-user\n"}
	h := newHarnessWith(t, nil, pols, func(c *Config) { c.Limits = e })
	return h, store
}

func spentToday(t *testing.T, s *limits.MemoryStore, user string) tokens.Money {
	t.Helper()
	day, _ := limits.Bucket(policy.Daily, time.Now())
	got, err := s.Spent(context.Background(), "capped", []limits.Counter{{User: user, Bucket: day}})
	if err != nil {
		t.Fatal(err)
	}
	return got[0]
}

// Each round costs 100 input tokens ($0.0001) and 10 output tokens ($0.0001).
func roundUsage() *fakeapi.Usage { return &fakeapi.Usage{InputTokens: 100, OutputTokens: 10} }

func TestCappedTenantPaysForEveryRoundOfTheMemoryLoop(t *testing.T) {
	for _, stream := range []bool{false, true} {
		name := "plain"
		if stream {
			name = "streamed"
		}
		t.Run(name+": the tenant and the user are charged both rounds, and see their cap", func(t *testing.T) {
			h, store := capsHarness(t)
			h.fake.SetResponder(func(r *fakeapi.Request) fakeapi.Reply {
				reply := fakeapi.TextReply("done")
				if r.AssistantTurns == 0 {
					reply = fakeapi.Blocks(fakeapi.MemoryCreate("/memories/a.md", "x"))
				}
				reply.Usage = roundUsage()
				reply.Header = http.Header{"Anthropic-Ratelimit-Tokens-Remaining": {"100"}}
				return reply
			})
			body := `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"note it"}]}`
			if stream {
				body = strings.Replace(body, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
			}
			resp := h.post("/v1/messages", keyCapped, body, "X-End-User", "alice")
			b := readAll(t, resp.Body)
			if resp.StatusCode != 200 || !(strings.Contains(b, `"done"`) || strings.Contains(b, "message_stop")) {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			if resp.Header.Get("Anthropic-Ratelimit-Tokens-Remaining") != "" || resp.Header.Get(limits.HeaderStatus) != "allowed" {
				t.Errorf("headers: %v", resp.Header)
			}
			h.proxy.Close() // waits for the handler: it settles after the reply reached the client
			for _, user := range []string{"", "alice"} {
				if got := spentToday(t, store, user); got != 400_000 {
					t.Errorf("spent by %q = %d nano-USD, want 400000 (two rounds of $0.0002)", user, got)
				}
			}
		})
	}
	t.Run("an upstream failure releases the hold and charges nothing", func(t *testing.T) {
		h, store := capsHarness(t)
		h.fake.Enqueue(fakeapi.Reply{Status: 500})
		resp := h.post("/v1/messages", keyCapped, `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"x"}]}`)
		readAll(t, resp.Body)
		if resp.StatusCode != 500 || resp.Header.Get(limits.HeaderStatus) == "" {
			t.Fatalf("%d, headers %v", resp.StatusCode, resp.Header)
		}
		h.proxy.Close() // waits for the handler: it releases after the reply reached the client
		if got := spentToday(t, store, ""); got != 0 {
			t.Errorf("spent %d", got)
		}
		// With nothing held, a hold of the whole cap fits.
		day, _ := limits.Bucket(policy.Daily, time.Now())
		r, err := store.Reserve(context.Background(), "probe", "capped", []limits.Counter{{Bucket: day, Cap: tokens.NanosPerUSD}}, tokens.NanosPerUSD, time.Minute)
		if err != nil || r.Refused != -1 {
			t.Errorf("after the release: %+v %v", r, err)
		}
	})
	t.Run("over the cap: 429 billing_error in the API's shape, nothing sent upstream", func(t *testing.T) {
		h, store := capsHarness(t)
		day, _ := limits.Bucket(policy.Daily, time.Now())
		if err := store.Settle(context.Background(), "seed", "capped", []limits.Counter{{Bucket: day}}, tokens.NanosPerUSD); err != nil {
			t.Fatal(err)
		}
		resp := h.post("/v1/messages", keyCapped, `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"x"}]}`)
		b := readAll(t, resp.Body)
		if resp.StatusCode != 429 || gjson.Get(b, "type").Str != "error" || gjson.Get(b, "error.type").Str != "billing_error" ||
			resp.Header.Get("X-Should-Retry") != "false" || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, b)
		}
		if n := len(h.fake.Requests()); n != 0 {
			t.Errorf("%d request(s) reached the upstream", n)
		}
		resp = h.post("/v1/messages/count_tokens", keyCapped, `{"model":"m","messages":[{"role":"user","content":"x"}]}`)
		if b := readAll(t, resp.Body); resp.StatusCode != 200 {
			t.Errorf("count_tokens is never limited: %d %s", resp.StatusCode, b)
		}
	})
}

// The upstream's organisation-wide ratelimit headers are not a capped
// tenant's to see on any route, pass-through ones included; an uncapped
// tenant still gets them.
func TestPassthroughHidesTheOrganisationsRatelimitFromACappedTenant(t *testing.T) {
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Anthropic-Ratelimit-Requests-Remaining", "4999")
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"data":[],"has_more":false}`))
	})
	pols := map[string]string{
		"capped.yaml": "tenant: capped\napi_keys_sha256: [\"" + sha(keyCapped) + "\"]\nlimits:\n  spend: [{period: daily, usd: 1}]\n",
		"acme.yaml":   "tenant: acme\napi_keys_sha256: [\"" + sha(keyAcme) + "\"]\n",
	}
	h := newHarnessWith(t, upstream, pols)
	for _, tc := range []struct {
		name, key string
		want      string
	}{
		{"a capped tenant's GET /v1/models has no organisation ratelimit header", keyCapped, ""},
		{"an uncapped tenant's keeps it", keyAcme, "4999"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, h.proxy.URL+"/v1/models", nil)
			req.Header.Set("X-Api-Key", tc.key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp.Body)
			if resp.StatusCode != 200 || resp.Header.Get("Anthropic-Ratelimit-Requests-Remaining") != tc.want {
				t.Fatalf("status %d, ratelimit header %q, want %q", resp.StatusCode, resp.Header.Get("Anthropic-Ratelimit-Requests-Remaining"), tc.want)
			}
		})
	}
}
