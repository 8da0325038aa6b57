package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// Purge leaves no row of the tenant in any of the store's tables, and
// every row of the others.
func TestPurgeLeavesNoRowOfTheTenant(t *testing.T) {
	db := newTestDB(t)
	s := db.open(t)
	ctx := context.Background()
	for _, tenant := range []string{"acme", "other"} {
		sc := memoryhook.Scope{Tenant: tenant}
		for _, in := range []string{
			`{"command":"create","path":"/memories/d/a.md","file_text":"a"}`,
			`{"command":"str_replace","path":"/memories/d/a.md","old_str":"a","new_str":"b"}`,
		} {
			if r := memoryhook.Exec(ctx, s, sc, []byte(in)); r.IsError {
				t.Fatal(r.Content)
			}
		}
		if err := s.PutContinuation(ctx, tenant, "msg_1", []byte("state"), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Purge(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"entries", "usage", "continuations", "memories", "versions"} {
		if n := db.queryInt(t, `SELECT count(*) FROM ctxproxy_memory_`+table+` WHERE tenant = 'acme'`); n != 0 {
			t.Errorf("%d rows of acme left in ctxproxy_memory_%s", n, table)
		}
		if n := db.queryInt(t, `SELECT count(*) FROM ctxproxy_memory_`+table+` WHERE tenant = 'other'`); n == 0 {
			t.Errorf("no rows of other left in ctxproxy_memory_%s", table)
		}
	}
}
