package tokens

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLastUsed(t *testing.T) {
	for _, store := range []struct {
		name string
		spec func(t *testing.T) string
	}{
		{"file ledger", func(t *testing.T) string { return "file:" + filepath.Join(t.TempDir(), "l.jsonl") }},
		{"postgres ledger", func(t *testing.T) string { return pgTestURL(t) }},
	} {
		t.Run(store.name, func(t *testing.T) { testLastUsed(t, store.spec(t)) })
	}
}

func testLastUsed(t *testing.T, spec string) {
	ctx := context.Background()
	now := time.Date(2026, 12, 5, 18, 40, 0, 0, time.UTC)
	since := now.Add(-7 * 24 * time.Hour)
	calls := []Call{
		{Time: now.Add(-8 * 24 * time.Hour), Tenant: "a", Model: "claude-opus-4-1"},                       // before since
		{Time: since.Add(-time.Minute), Tenant: "a", Model: "claude-opus-4-1-20250805"},                   // in since's hour: counted, as the rollups count it
		{Time: now.Add(-50 * time.Hour), Tenant: "a", Model: "claude-opus-4-5"},                           // older than the next
		{Time: now.Add(-49*time.Hour - 30*time.Minute), Tenant: "a", Model: "claude-opus-4-5"},            // the latest: its hour
		{Time: now.Add(-time.Hour), Tenant: "b", Model: "claude-opus-4-5"},                                // another tenant
		{Time: now.Add(-time.Hour), Tenant: "a", Model: "claude-haiku-4-5", Shadow: &Shadow{Name: "lab"}}, // the policy lab's
		{Time: now.Add(-time.Hour), Tenant: "a", Model: "claude-sonnet-4-5", CountTokens: &CountTokens{}}, // count_tokens
		{Time: now.Add(-2 * time.Hour), Tenant: "b", Model: "claude-sonnet-4-0"},
	}
	l, err := OpenLedger(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range calls { // one a batch: PostgreSQL folds the first, the others stay pending
		if err := l.Append(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	files := func() []string {
		path, ok := FileLedgerPath(spec)
		if !ok {
			return nil
		}
		entries, err := os.ReadDir(filepath.Dir(path))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	before := files()
	got, err := l.(ModelUseLedger).LastUsed(ctx, since)
	if err != nil {
		t.Fatal(err)
	}
	if after := files(); !slices.Equal(before, after) {
		t.Errorf("reading wrote files: %v, then %v", before, after)
	}
	var rows []string
	for _, u := range got {
		rows = append(rows, u.Tenant+" "+u.Model+" "+u.Hour.Format(time.RFC3339))
	}
	slices.Sort(rows)
	want := []string{
		"a claude-opus-4-1-20250805 " + since.Truncate(time.Hour).Format(time.RFC3339),
		"a claude-opus-4-5 2026-12-03T17:00:00Z",
		"b claude-opus-4-5 2026-12-05T17:00:00Z",
		"b claude-sonnet-4-0 2026-12-05T16:00:00Z",
	}
	if !slices.Equal(rows, want) {
		t.Errorf("LastUsed:\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
