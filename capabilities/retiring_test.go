package capabilities

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
)

func TestRetiringModelsAreThoseUsedInTheLastWeekOrNamedByThePolicy(t *testing.T) {
	_, u := startFake(t)
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	var seen [][]Retiring
	c := New(Options{Upstream: u, Now: func() time.Time { return now },
		Tenants: tenants(
			Tenant{Name: "acme", Key: "k"},
			Tenant{Name: "named", Key: "k", Models: []string{"claude-sonnet-4-0", "claude-opus-4-8"}},
		),
		OnRetiring: func(r []Retiring) { seen = append(seen, r) }})
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	ids := func(rs []Retiring) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Tenant+"/"+r.Model+"/"+r.Lifecycle)
		}
		return out
	}
	if got := ids(c.Retiring("acme")); got != nil {
		t.Errorf("a tenant that used nothing: %v", got)
	}
	if got, want := ids(c.Retiring("named")), []string{"named/claude-sonnet-4-20250514/deprecated"}; !slices.Equal(got, want) {
		t.Errorf("the policy names a deprecated model by its alias: %v, want %v", got, want)
	}

	c.Used("acme", "claude-opus-4-5", now.Add(-time.Hour))               // deprecated, by its alias
	c.Used("acme", "claude-opus-4-1-20250805", now.Add(-8*24*time.Hour)) // retired, but eight days ago
	c.Used("acme", "claude-mythos-preview", now.Add(-6*24*time.Hour))    // retired
	c.Used("acme", "claude-opus-4-8", now)                               // active
	c.Used("acme", "made-up-model", now)                                 // not listed: not kept
	want := []string{"acme/claude-mythos-preview/retired", "acme/claude-opus-4-5-20251101/deprecated"}
	if got := ids(c.Retiring("acme")); !slices.Equal(got, want) {
		t.Errorf("used: %v, want %v (earliest retires_at first)", got, want)
	}
	// The next read keeps what was used, and tells OnRetiring.
	now = now.Add(10 * time.Minute)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	last := seen[len(seen)-1]
	if got := ids(last); !slices.Equal(got, append(want, "named/claude-sonnet-4-20250514/deprecated")) {
		t.Errorf("OnRetiring after the read: %v", got)
	}
	if r := last[1]; r.RetiresAt != "2027-01-22T00:00:00Z" || !r.LastUsed.Equal(now.Add(-10*time.Minute-time.Hour)) || r.Named {
		t.Errorf("claude-opus-4-5: %+v", r)
	}
	// A week after its last use a model no longer concerns the tenant.
	now = now.Add(7 * 24 * time.Hour)
	if got := ids(c.Retiring("acme")); got != nil {
		t.Errorf("a week later: %v", got)
	}
}

func TestUsedDoesNotAllocate(t *testing.T) {
	_, u := startFake(t)
	c := New(Options{Upstream: u, Tenants: tenants(Tenant{Name: "t", Key: "k"})})
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	if n := testing.AllocsPerRun(100, func() {
		c.Used("t", "claude-opus-4-5", at)
		c.Used("t", "unknown", at)
	}); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

func TestSeededUsageMergesWithWhatTheCacheRecorded(t *testing.T) {
	fake, u := startFake(t)
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	var seen [][]Retiring
	c := New(Options{Upstream: u, Now: func() time.Time { return now },
		Tenants:    tenants(Tenant{Name: "acme", Key: "k"}, Tenant{Name: "other", Key: "k"}),
		OnRetiring: func(r []Retiring) { seen = append(seen, r) }})
	lastUsed := func(t *testing.T, model string) time.Time {
		t.Helper()
		for _, r := range c.Retiring("acme") {
			if r.Model == model {
				return r.LastUsed
			}
		}
		return time.Time{}
	}

	// Seeded before the first read, as at a start: the tenant is not read yet.
	c.SeedUsage([]Use{
		{Tenant: "acme", Model: "claude-opus-4-5", At: now.Add(-48 * time.Hour)},              // deprecated, by its alias
		{Tenant: "acme", Model: "claude-opus-4-1-20250805", At: now.Add(-8 * 24 * time.Hour)}, // retired, out of the window
		{Tenant: "acme", Model: "claude-opus-4-9", At: now.Add(-24 * time.Hour)},              // not listed yet
		{Tenant: "gone", Model: "claude-opus-4-5", At: now},                                   // a tenant that is not read
	})
	if len(seen) != 0 {
		t.Errorf("OnRetiring before any read: %v", seen)
	}
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Run("a seed before the tenant's first read counts at the read", func(t *testing.T) {
		rs := seen[len(seen)-1]
		if len(rs) != 1 || rs[0].Tenant != "acme" || rs[0].Model != "claude-opus-4-5-20251101" || !rs[0].LastUsed.Equal(now.Add(-48*time.Hour)) {
			t.Errorf("OnRetiring: %+v", rs)
		}
	})
	t.Run("the later of the seeded and the recorded time is kept", func(t *testing.T) {
		c.Used("acme", "claude-opus-4-5", now.Add(-time.Hour))
		c.SeedUsage([]Use{{Tenant: "acme", Model: "claude-opus-4-5-20251101", At: now.Add(-3 * time.Hour)}})
		if got := lastUsed(t, "claude-opus-4-5-20251101"); !got.Equal(now.Add(-time.Hour)) {
			t.Errorf("an older seed: last used %v", got)
		}
		c.SeedUsage([]Use{{Tenant: "acme", Model: "claude-opus-4-5", At: now.Add(-time.Minute)}})
		if got := lastUsed(t, "claude-opus-4-5-20251101"); !got.Equal(now.Add(-time.Minute)) {
			t.Errorf("a newer seed: last used %v", got)
		}
		if rs := seen[len(seen)-1]; len(rs) != 1 || !rs[0].LastUsed.Equal(now.Add(-time.Minute)) {
			t.Errorf("a seed after a read tells OnRetiring: %+v", rs)
		}
	})
	t.Run("a seeded model the list lacks counts once it is listed", func(t *testing.T) {
		models := fakeapi.DefaultModels()
		m := models[0]
		m.ID, m.Aliases, m.Lifecycle, m.DeprecatedAt, m.RetiresAt = "claude-opus-4-9-20261201", []string{"claude-opus-4-9"}, fakeapi.LifecycleDeprecated, "2026-12-01T00:00:00Z", "2027-03-01T00:00:00Z"
		fake.SetModels(append(models, m))
		now = now.Add(10 * time.Minute)
		if err := c.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := lastUsed(t, "claude-opus-4-9-20261201"); !got.Equal(now.Add(-10*time.Minute - 24*time.Hour)) {
			t.Errorf("last used %v; retiring %+v", got, c.Retiring("acme"))
		}
		if got := c.Retiring("other"); got != nil {
			t.Errorf("another tenant: %+v", got)
		}
	})
	t.Run("a seed leaves the window as a recorded use does", func(t *testing.T) {
		now = now.Add(7 * 24 * time.Hour)
		if err := c.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := c.Retiring("acme"); got != nil {
			t.Errorf("a week later: %+v", got)
		}
	})
}
