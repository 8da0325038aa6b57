package memapi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAuditListIsTheNewestOfTheTenantAndSkipsWhatItCannotRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, err := OpenAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i, tenant := range []string{"acme", "globex", "acme", "acme", "globex", "acme"} {
		if err := a.Append(AuditRecord{Tenant: tenant, Method: "GET", Path: "/" + string(rune('a'+i))}); err != nil {
			t.Fatal(err)
		}
		if i == 2 { // a line too long to read, and one that is no record
			f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			f.WriteString(strings.Repeat("z", maxAuditLine+10) + "\n{not json\n")
			f.Close()
		}
	}
	for _, tc := range []struct {
		limit int
		want  string
	}{{1, "/f"}, {3, "/f /d /c"}, {10, "/f /d /c /a"}} {
		recs, skipped, err := a.List("acme", tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range recs {
			got = append(got, r.Path)
		}
		if strings.Join(got, " ") != tc.want || skipped != 2 {
			t.Errorf("limit %d: %q, %d skipped; want %q, 2", tc.limit, got, skipped, tc.want)
		}
	}
}

func TestAuditRecordFieldsAreCutToTheirBounds(t *testing.T) {
	long := strings.Repeat("é", 5000)
	r := AuditRecord{Operator: long, Tenant: long, Method: long, Path: long, MemoryID: long, VersionID: long,
		Before: long, After: long, Detail: long}.bounded()
	for name, f := range map[string]string{"operator": r.Operator, "tenant": r.Tenant, "method": r.Method,
		"memory_id": r.MemoryID, "version_id": r.VersionID, "before": r.Before, "after": r.After} {
		if len(f) > maxAuditShort+32 || !strings.HasSuffix(f, "…(9872 more bytes)") {
			t.Errorf("%s: %d bytes, ends %q", name, len(f), f[len(f)-24:])
		}
	}
	for name, f := range map[string]string{"path": r.Path, "detail": r.Detail} {
		if len(f) > maxAuditLong+32 || !strings.HasSuffix(f, "…(8976 more bytes)") {
			t.Errorf("%s: %d bytes, ends %q", name, len(f), f[len(f)-24:])
		}
	}
	if short := (AuditRecord{Path: "/v1/x"}).bounded(); short.Path != "/v1/x" {
		t.Errorf("a short field changed: %q", short.Path)
	}
}
