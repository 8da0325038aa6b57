package pgurl

import "testing"

func TestIs(t *testing.T) {
	for s, want := range map[string]bool{
		"postgres://u@h/db": true, "postgresql://h/db": true,
		"file": false, "": false, "/var/lib/ledger.jsonl": false, "redis://h": false, "Postgres://h": false, "postgres:h": false,
	} {
		if got := Is(s); got != want {
			t.Errorf("Is(%q) = %v, want %v", s, got, want)
		}
	}
}
