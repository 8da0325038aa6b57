package memoryhook

import (
	"context"
	"testing"
)

// BenchmarkExecFileStore is one memory command on the file store, as the
// proxy runs it in a memory round.
func BenchmarkExecFileStore(b *testing.B) {
	st, err := NewFileStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	sc := Scope{Tenant: "bench"}
	benchExec(b, st, sc)
}

// BenchmarkExecScoped is the same commands through scopes and the gate (a
// user's store at /memories, the tenant's read-only one at
// /memories/team): what routing, the merged listing and the secret scan
// add.
func BenchmarkExecScoped(b *testing.B) {
	st, err := NewFileStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	team, _ := ParsePath("/memories/team")
	root, _ := ParsePath("/memories")
	sc := Scope{Tenant: "bench", Mounts: []Mount{{At: team, Store: "bench", ReadOnly: true}, {At: root, Store: "bench~0123abcd"}},
		Gate: &Gate{RefuseSecrets: true}}
	benchExec(b, st, sc)
}

func benchExec(b *testing.B, st Store, sc Scope) {
	ctx := context.Background()
	if r := Exec(ctx, st, sc, []byte(`{"command":"create","path":"/memories/notes.md","file_text":"remember this\n"}`)); r.IsError {
		b.Fatal(r.Content)
	}
	for _, c := range []struct{ name, input string }{
		{"view dir", `{"command":"view","path":"/memories"}`},
		{"view file", `{"command":"view","path":"/memories/notes.md"}`},
		{"str_replace", `{"command":"str_replace","path":"/memories/notes.md","old_str":"remember","new_str":"remember"}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if r := Exec(ctx, st, sc, []byte(c.input)); r.IsError {
					b.Fatal(r.Content)
				}
			}
		})
	}
}
