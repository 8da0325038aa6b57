package capabilities

import (
	"context"
	"strconv"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestRefusalsAreKeptPerTenantModelAndThinkingTypeAndBounded(t *testing.T) {
	var r Refusals
	f := Refusal{Tenant: "acme", Model: "m", Thinking: "between_tools", Edit: "clear_thinking_20251015"}
	if r.Has(f) {
		t.Fatal("an empty set has it")
	}
	if !r.Add(f) || r.Add(f) {
		t.Fatal("Add should report a new refusal once")
	}
	for _, other := range []Refusal{
		{Tenant: "other", Model: "m", Thinking: "between_tools", Edit: f.Edit},
		{Tenant: "acme", Model: "m2", Thinking: "between_tools", Edit: f.Edit},
		{Tenant: "acme", Model: "m", Thinking: "enabled", Edit: f.Edit},
	} {
		if r.Has(other) {
			t.Errorf("%+v is known", other)
		}
	}
	if !r.Has(f) {
		t.Fatal("not learned")
	}
	for i := range maxRefusals {
		r.Add(Refusal{Tenant: "t", Model: strconv.Itoa(i)})
	}
	if r.Has(f) || len(r.set) != maxRefusals || int(r.n.Load()) != maxRefusals {
		t.Errorf("the oldest should be forgotten past %d: has %v, %d kept", maxRefusals, r.Has(f), len(r.set))
	}
	if !r.Has(Refusal{Tenant: "t", Model: strconv.Itoa(maxRefusals - 1)}) {
		t.Error("the newest is forgotten")
	}
}

func TestACacheLogsARefusalOnceWithTenantAndModel(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	c := New(Options{Log: zap.New(core)})
	for range 3 {
		c.Refuse("acme", "claude-opus-5", "between_tools", "clear_thinking_20251015")
	}
	if !c.Refuses("acme", "claude-opus-5", "between_tools", "clear_thinking_20251015") {
		t.Error("not learned")
	}
	lines := logs.FilterField(zap.String("tenant", "acme")).FilterField(zap.String("model", "claude-opus-5")).All()
	if len(lines) != 1 {
		t.Errorf("%d log lines, want 1", len(lines))
	}
	var nilCache *Cache
	nilCache.Refuse("acme", "m", "", "e")
	if nilCache.Refuses("acme", "m", "", "e") {
		t.Error("a nil cache learned")
	}
}

func TestARefusalIsForgottenWhenTheTenantsModelsAreReadAgainAndNotLoggedTwice(t *testing.T) {
	_, u := startFake(t)
	core, logs := observer.New(zap.InfoLevel)
	c := New(Options{Upstream: u, Log: zap.New(core), Tenants: tenants(Tenant{Name: "acme", Key: "sk-acme"}, Tenant{Name: "other", Key: "sk-other"})})
	const edit = "clear_thinking_20251015"
	c.Refuse("acme", "claude-opus-4-8", "between_tools", edit)
	c.Refuse("gone", "claude-opus-4-8", "between_tools", edit) // a tenant no longer in the policies
	c.Refuse("other", "claude-opus-4-8", "between_tools", edit)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"acme", "other"} {
		if c.Refuses(tenant, "claude-opus-4-8", "between_tools", edit) {
			t.Errorf("%s: still refused after its models were read again", tenant)
		}
	}
	if !c.Refuses("gone", "claude-opus-4-8", "between_tools", edit) {
		t.Error("a tenant that was not read lost what was learned")
	}
	c.Refuse("acme", "claude-opus-4-8", "between_tools", edit) // the API still refuses it
	if !c.Refuses("acme", "claude-opus-4-8", "between_tools", edit) {
		t.Error("not learned again")
	}
	if n := logs.FilterField(zap.String("tenant", "acme")).Len(); n != 1 {
		t.Errorf("%d log lines for acme, want 1 (relearning logs nothing new)", n)
	}
}

func TestForgetKeepsTheOthersInTheOrderLearned(t *testing.T) {
	var r Refusals
	for i := range maxRefusals + 10 { // full, its oldest entry in the middle of the ring
		tenant := "a"
		if i%2 == 1 {
			tenant = "b"
		}
		r.Add(Refusal{Tenant: tenant, Model: strconv.Itoa(i)})
	}
	r.Forget("a")
	if int(r.n.Load()) != maxRefusals/2 || len(r.ring) != maxRefusals/2 {
		t.Fatalf("%d kept, ring %d, want %d", r.n.Load(), len(r.ring), maxRefusals/2)
	}
	for i, f := range r.ring {
		if want := strconv.Itoa(11 + 2*i); f.Tenant != "b" || f.Model != want {
			t.Fatalf("ring[%d] = %+v, want b %s", i, f, want)
		}
	}
	// The next ones forget b's oldest first.
	r.Add(Refusal{Tenant: "c"})
	if !r.Has(Refusal{Tenant: "b", Model: "11"}) || !r.Has(Refusal{Tenant: "c"}) {
		t.Error("adding below the bound forgot one")
	}
}
