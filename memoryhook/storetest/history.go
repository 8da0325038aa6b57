package storetest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// RunHistory is the conformance suite of memory history: both
// stores version every write alike.
func RunHistory(t *testing.T, newStore func(t *testing.T) memoryhook.Governed) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, h *hist)
	}{
		{"every model write adds one version with its actor, newest first", historyOfModelWrites},
		{"a write that changes nothing adds no version", historyNoChange},
		{"a memory keeps its id across renames, a directory rename included", historyRenames},
		{"deleting a directory adds a deleted version per file, and versions outlive it", historyDeleteDir},
		{"history is invisible to the model", historyInvisible},
		{"versions filter by request, key, operation and memory", historyFilters},
		{"a precondition that does not hold writes nothing", historyPreconditions},
		{"redaction clears content and keeps actor and time, never the head", historyRedact},
		{"retention keeps the head and the latest, history off keeps only heads", historyPrune},
		{"purge leaves nothing of the tenant and only of it", historyPurge},
		{"a tenant's sub-stores are listed and kept apart", historySubStores},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStore(t)
			tc.run(t, &hist{t: t, st: st, ctx: context.Background()})
		})
	}
}

type hist struct {
	t   *testing.T
	st  memoryhook.Governed
	ctx context.Context
}

func actor(req string) memoryhook.Actor {
	return memoryhook.Actor{Type: memoryhook.ActorModel, Tenant: "acme", KeyID: "0123abcd", RequestID: req, MessageID: "msg_" + req}
}

// exec runs one model command for tenant acme as request req.
func (h *hist) exec(tenant, req, in string) {
	h.t.Helper()
	sc := memoryhook.Scope{Tenant: tenant, Actor: actor(req)}
	if r := memoryhook.Exec(h.ctx, h.st, sc, []byte(in)); r.IsError {
		h.t.Fatalf("%s: %s", in, r.Content)
	}
}

func (h *hist) versions(tenant string, q memoryhook.VersionQuery) []memoryhook.Version {
	h.t.Helper()
	vs, err := h.st.Versions(h.ctx, tenant, q)
	if err != nil {
		h.t.Fatal(err)
	}
	return vs
}

func (h *hist) memories(tenant string) []memoryhook.Memory {
	h.t.Helper()
	ms, err := h.st.Memories(h.ctx, tenant)
	if err != nil {
		h.t.Fatal(err)
	}
	return ms
}

// summary is "op path content" per version, newest first.
func summary(vs []memoryhook.Version) string {
	var b strings.Builder
	for _, v := range vs {
		fmt.Fprintf(&b, "%s %s", v.Op, v.Path)
		if v.HasContent {
			fmt.Fprintf(&b, " %q", v.Content)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func (h *hist) want(what, got, want string) {
	h.t.Helper()
	if got != want {
		h.t.Errorf("%s:\ngot:\n%s\nwant:\n%s", what, got, want)
	}
}

func historyOfModelWrites(t *testing.T, h *hist) {
	h.exec("acme", "req_1", `{"command":"create","path":"/memories/a.md","file_text":"one\n"}`)
	h.exec("acme", "req_2", `{"command":"str_replace","path":"/memories/a.md","old_str":"one","new_str":"two"}`)
	h.exec("acme", "req_3", `{"command":"insert","path":"/memories/a.md","insert_line":1,"insert_text":"three\n"}`)
	h.exec("acme", "req_4", `{"command":"rename","old_path":"/memories/a.md","new_path":"/memories/b.md"}`)
	h.exec("acme", "req_5", `{"command":"delete","path":"/memories/b.md"}`)
	vs := h.versions("acme", memoryhook.VersionQuery{Content: true})
	h.want("versions", summary(vs), `deleted b.md
modified b.md "two\nthree\n"
modified a.md "two\nthree\n"
modified a.md "two\n"
created a.md "one\n"
`)
	if len(vs) != 5 {
		return
	}
	for i, v := range vs {
		req := fmt.Sprintf("req_%d", 5-i)
		if v.MemoryID != vs[0].MemoryID || !strings.HasPrefix(v.MemoryID, "mem_") || !strings.HasPrefix(v.ID, "memver_") {
			t.Errorf("version %d: ids %s %s", i, v.ID, v.MemoryID)
		}
		if v.Actor != actor(req) {
			t.Errorf("version %d: actor %+v, want %+v", i, v.Actor, actor(req))
		}
		if v.Op != memoryhook.OpDeleted && (v.SHA256 != memoryhook.SHA256Hex(v.Content) || v.Size != int64(len(v.Content))) {
			t.Errorf("version %d: sha %s size %d for %q", i, v.SHA256, v.Size, v.Content)
		}
		if i > 0 && (vs[i-1].Seq <= v.Seq || vs[i-1].At.Before(v.At)) {
			t.Errorf("version %d is not older than the one before it", i)
		}
	}
	if ms := h.memories("acme"); len(ms) != 0 {
		t.Errorf("memories after delete: %+v", ms)
	}
}

func historyNoChange(t *testing.T, h *hist) {
	h.exec("acme", "r1", `{"command":"create","path":"/memories/a.md","file_text":"same"}`)
	h.exec("acme", "r2", `{"command":"str_replace","path":"/memories/a.md","old_str":"same","new_str":"same"}`)
	h.want("versions", summary(h.versions("acme", memoryhook.VersionQuery{})), "created a.md\n")
}

func historyRenames(t *testing.T, h *hist) {
	h.exec("acme", "r1", `{"command":"create","path":"/memories/d/x.md","file_text":"x"}`)
	h.exec("acme", "r2", `{"command":"create","path":"/memories/d/e/y.md","file_text":"y"}`)
	before := h.memories("acme")
	h.exec("acme", "r3", `{"command":"rename","old_path":"/memories/d","new_path":"/memories/n/d2"}`)
	after := h.memories("acme")
	if len(before) != 2 || len(after) != 2 {
		t.Fatalf("memories %+v then %+v", before, after)
	}
	ids := map[string]string{}
	for _, m := range before {
		ids[m.ID] = m.Path
	}
	for _, m := range after {
		old, ok := ids[m.ID]
		if !ok || "n/d2"+strings.TrimPrefix(old, "d") != m.Path {
			t.Errorf("memory %s at %s was at %q", m.ID, m.Path, old)
		}
		head, err := h.st.Version(h.ctx, "acme", m.VersionID, true)
		if err != nil || head.Op != memoryhook.OpModified || head.Path != m.Path || head.SHA256 != m.SHA256 || head.Actor.RequestID != "r3" {
			t.Errorf("head of %s: %+v %v", m.Path, head, err)
		}
	}
	h.want("paths", after[0].Path+" "+after[1].Path, "n/d2/e/y.md n/d2/x.md")
}

func historyDeleteDir(t *testing.T, h *hist) {
	h.exec("acme", "r1", `{"command":"create","path":"/memories/d/x.md","file_text":"x"}`)
	h.exec("acme", "r2", `{"command":"create","path":"/memories/d/e/y.md","file_text":"y"}`)
	first := h.versions("acme", memoryhook.VersionQuery{})
	h.exec("acme", "r3", `{"command":"delete","path":"/memories/d"}`)
	vs := h.versions("acme", memoryhook.VersionQuery{Op: memoryhook.OpDeleted})
	lines := strings.Split(summary(vs), "\n")
	sort.Strings(lines) // one write: no order between its versions
	h.want("deleted", strings.Join(lines, "\n"), "\ndeleted d/e/y.md\ndeleted d/x.md")
	for _, v := range first {
		got, err := h.st.Version(h.ctx, "acme", v.ID, true)
		if err != nil || !got.HasContent {
			t.Errorf("version %s after the delete: %+v %v", v.ID, got, err)
		}
	}
	if _, err := h.st.MemoryByID(h.ctx, "acme", first[0].MemoryID); !errors.Is(err, memoryhook.ErrNotExist) {
		t.Errorf("deleted memory by id: %v", err)
	}
}

func historyInvisible(t *testing.T, h *hist) {
	h.exec("acme", "r1", `{"command":"create","path":"/memories/a.md","file_text":"a"}`)
	h.exec("acme", "r2", `{"command":"str_replace","path":"/memories/a.md","old_str":"a","new_str":"b"}`)
	got, err := h.st.View(h.ctx, memoryhook.Scope{Tenant: "acme"}, mustPath("/memories"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got, "history") || strings.Count(got, "\n") != 2 || !strings.HasSuffix(got, "\t/memories/a.md") {
		t.Errorf("view shows more than a.md:\n%s", got)
	}
}

func mustPath(s string) memoryhook.Path {
	p, err := memoryhook.ParsePath(s)
	if err != nil {
		panic(err)
	}
	return p
}

func historyFilters(t *testing.T, h *hist) {
	h.exec("acme", "r1", `{"command":"create","path":"/memories/a.md","file_text":"a"}`)
	h.exec("acme", "r2", `{"command":"create","path":"/memories/b.md","file_text":"b"}`)
	h.exec("acme", "r2", `{"command":"str_replace","path":"/memories/a.md","old_str":"a","new_str":"A"}`)
	all := h.versions("acme", memoryhook.VersionQuery{})
	if len(all) != 3 {
		t.Fatalf("versions: %s", summary(all))
	}
	a := all[0].MemoryID
	for _, tc := range []struct {
		q    memoryhook.VersionQuery
		want string
	}{
		{memoryhook.VersionQuery{RequestID: "r2"}, "modified a.md\ncreated b.md\n"},
		{memoryhook.VersionQuery{RequestID: "r9"}, ""},
		{memoryhook.VersionQuery{KeyID: "0123abcd"}, "modified a.md\ncreated b.md\ncreated a.md\n"},
		{memoryhook.VersionQuery{KeyID: "ffffffff"}, ""},
		{memoryhook.VersionQuery{Op: memoryhook.OpCreated}, "created b.md\ncreated a.md\n"},
		{memoryhook.VersionQuery{MemoryID: a}, "modified a.md\ncreated a.md\n"},
		{memoryhook.VersionQuery{Limit: 1}, "modified a.md\n"},
		{memoryhook.VersionQuery{BeforeSeq: all[0].Seq, Limit: 1}, "created b.md\n"},
		{memoryhook.VersionQuery{Since: all[0].At.Add(time.Hour)}, ""},
		{memoryhook.VersionQuery{Until: all[2].At.Add(-time.Hour)}, ""},
	} {
		h.want(fmt.Sprintf("%+v", tc.q), summary(h.versions("acme", tc.q)), tc.want)
	}
	if got := h.versions("other", memoryhook.VersionQuery{}); len(got) != 0 {
		t.Errorf("another tenant sees %s", summary(got))
	}
}

func historyPreconditions(t *testing.T, h *hist) {
	h.exec("acme", "r1", `{"command":"create","path":"/memories/a.md","file_text":"a"}`)
	m := h.memories("acme")[0]
	op := memoryhook.Actor{Type: memoryhook.ActorOperator, Operator: "admin"}
	b := h.st.Backend()
	p := mustPath("/memories/a.md")
	set := func(s string) func([]byte) ([]byte, error) {
		return func([]byte) ([]byte, error) { return []byte(s), nil }
	}
	for _, e := range []memoryhook.Expect{{SHA256: memoryhook.SHA256Hex([]byte("b"))}, {MemoryID: "mem_other"}} {
		sc := memoryhook.Scope{Tenant: "acme", Actor: op, Expect: &e}
		if err := b.Update(h.ctx, sc, p, set("x")); !errors.Is(err, memoryhook.ErrPrecondition) {
			t.Errorf("update with %+v: %v", e, err)
		}
		if err := b.Delete(h.ctx, sc, p); !errors.Is(err, memoryhook.ErrPrecondition) {
			t.Errorf("delete with %+v: %v", e, err)
		}
		if err := b.Rename(h.ctx, sc, p, mustPath("/memories/c.md")); !errors.Is(err, memoryhook.ErrPrecondition) {
			t.Errorf("rename with %+v: %v", e, err)
		}
	}
	h.want("after refused writes", summary(h.versions("acme", memoryhook.VersionQuery{})), "created a.md\n")
	sc := memoryhook.Scope{Tenant: "acme", Actor: op, Expect: &memoryhook.Expect{MemoryID: m.ID, SHA256: m.SHA256}}
	if err := b.Update(h.ctx, sc, p, set("x")); err != nil {
		t.Fatal(err)
	}
	vs := h.versions("acme", memoryhook.VersionQuery{})
	h.want("after the update", summary(vs), "modified a.md\ncreated a.md\n")
	if vs[0].Actor != op {
		t.Errorf("operator actor: %+v", vs[0].Actor)
	}
}

func historyRedact(t *testing.T, h *hist) {
	h.exec("acme", "r1", `{"command":"create","path":"/memories/a.md","file_text":"secret"}`)
	h.exec("acme", "r2", `{"command":"str_replace","path":"/memories/a.md","old_str":"secret","new_str":"clean"}`)
	vs := h.versions("acme", memoryhook.VersionQuery{})
	by := memoryhook.Actor{Type: memoryhook.ActorOperator, Operator: "admin"}
	if _, err := h.st.Redact(h.ctx, "acme", vs[0].ID, by); !errors.Is(err, memoryhook.ErrHeadVersion) {
		t.Errorf("redact head: %v", err)
	}
	got, err := h.st.Redact(h.ctx, "acme", vs[1].ID, by)
	if err != nil {
		t.Fatal(err)
	}
	if got.Path != "" || got.SHA256 != "" || got.Size != 0 || got.RedactedAt.IsZero() || got.RedactedBy == nil ||
		*got.RedactedBy != by || got.Actor != actor("r1") || !got.At.Equal(vs[1].At) {
		t.Errorf("redacted: %+v", got)
	}
	full, err := h.st.Version(h.ctx, "acme", vs[1].ID, true)
	if err != nil || full.HasContent || len(full.Content) != 0 {
		t.Errorf("redacted content: %+v %v", full, err)
	}
	if _, err := h.st.Redact(h.ctx, "acme", "memver_none", by); !errors.Is(err, memoryhook.ErrNotExist) {
		t.Errorf("redact missing: %v", err)
	}
	h.want("memory", h.memories("acme")[0].SHA256, memoryhook.SHA256Hex([]byte("clean")))
}

func historyPrune(t *testing.T, h *hist) {
	h.exec("acme", "r0", `{"command":"create","path":"/memories/a.md","file_text":"0"}`)
	for i := 1; i <= 4; i++ {
		h.exec("acme", "r", fmt.Sprintf(`{"command":"str_replace","path":"/memories/a.md","old_str":"%d","new_str":"%d"}`, i-1, i))
	}
	h.exec("acme", "r", `{"command":"create","path":"/memories/gone.md","file_text":"g"}`)
	h.exec("acme", "r", `{"command":"delete","path":"/memories/gone.md"}`)
	later := time.Now().Add(48 * time.Hour)
	n, err := h.st.Prune(h.ctx, "acme", memoryhook.Retention{KeepDays: 30, KeepLatest: 10}, later)
	if err != nil || n != 0 {
		t.Errorf("prune within retention: %d %v", n, err)
	}
	n, err = h.st.Prune(h.ctx, "acme", memoryhook.Retention{KeepDays: 1, KeepLatest: 2}, later)
	if err != nil || n != 5 {
		t.Errorf("prune keeping 2: %d %v", n, err)
	}
	h.want("kept", summary(h.versions("acme", memoryhook.VersionQuery{Content: true})), "modified a.md \"4\"\nmodified a.md \"3\"\n")
	n, err = h.st.Prune(h.ctx, "acme", memoryhook.Retention{KeepDays: 0}, time.Now())
	if err != nil || n != 1 {
		t.Errorf("prune with history off: %d %v", n, err)
	}
	h.want("heads", summary(h.versions("acme", memoryhook.VersionQuery{Content: true})), "modified a.md \"4\"\n")
	h.exec("acme", "r", `{"command":"str_replace","path":"/memories/a.md","old_str":"4","new_str":"5"}`)
	h.want("after a write", summary(h.versions("acme", memoryhook.VersionQuery{})), "modified a.md\nmodified a.md\n")
}

func historyPurge(t *testing.T, h *hist) {
	for _, tenant := range []string{"acme", "other"} {
		h.exec(tenant, "r1", `{"command":"create","path":"/memories/d/a.md","file_text":"a"}`)
		h.exec(tenant, "r2", `{"command":"create","path":"/memories/b.md","file_text":"b"}`)
		h.exec(tenant, "r3", `{"command":"delete","path":"/memories/b.md"}`)
	}
	files, versions, err := h.st.Purge(h.ctx, "acme")
	if err != nil || files != 1 || versions != 3 {
		t.Errorf("purge: %d files, %d versions, %v", files, versions, err)
	}
	if got := h.versions("acme", memoryhook.VersionQuery{}); len(got) != 0 {
		t.Errorf("versions after purge: %s", summary(got))
	}
	if got := h.memories("acme"); len(got) != 0 {
		t.Errorf("memories after purge: %+v", got)
	}
	view, err := h.st.View(h.ctx, memoryhook.Scope{Tenant: "acme"}, mustPath("/memories"), nil)
	if err != nil || strings.Count(view, "\n") != 1 {
		t.Errorf("view after purge: %q %v", view, err)
	}
	if got := h.versions("other", memoryhook.VersionQuery{}); len(got) != 3 {
		t.Errorf("other tenant after purge: %s", summary(got))
	}
	// The tenant can start again.
	h.exec("acme", "r4", `{"command":"create","path":"/memories/d/a.md","file_text":"new"}`)
	h.want("after purge", summary(h.versions("acme", memoryhook.VersionQuery{})), "created d/a.md\n")
}

func historySubStores(t *testing.T, h *hist) {
	for _, store := range []string{"default", "default~89abcdef", "default~0123abcd", "default-x", "defaultx", "acme~0123abcd"} {
		h.exec(store, "r1", `{"command":"create","path":"/memories/a.md","file_text":"`+store+`"}`)
	}
	list := func(tenant string) string {
		t.Helper()
		names, err := h.st.SubStores(h.ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(names, " ")
	}
	h.want("default's", list("default"), "default~0123abcd default~89abcdef")
	h.want("acme's", list("acme"), "acme~0123abcd")
	h.want("defaultx's", list("defaultx"), "")
	for _, store := range []string{"default", "default~0123abcd"} {
		h.want(store, summary(h.versions(store, memoryhook.VersionQuery{Content: true})), "created a.md \""+store+"\"\n")
	}
	if _, _, err := h.st.Purge(h.ctx, "default~0123abcd"); err != nil {
		t.Fatal(err)
	}
	h.want("default's after a purge", list("default"), "default~89abcdef")
	h.want("default after a purge", summary(h.versions("default", memoryhook.VersionQuery{Content: true})), "created a.md \"default\"\n")
}
