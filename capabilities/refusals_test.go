package capabilities

import (
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
