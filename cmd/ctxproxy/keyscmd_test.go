package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

func TestKeysCommandLine(t *testing.T) {
	env := func(k string) string { return map[string]string{"CTXPROXY_ADMIN_TOKEN": "tok"}[k] }
	for _, tc := range []struct {
		name string
		args []string
		want string // the error's text, "" for none
		id   string
	}{
		{"create needs a name", []string{"create", "--tenant", "acme"}, "--name is required", ""},
		{"every command needs a tenant", []string{"ls"}, "--tenant is required", ""},
		{"revoke needs the key's id", []string{"revoke", "--tenant", "acme"}, "give the key's id", ""},
		{"the id may come before the flags", []string{"revoke", "key_1", "--tenant", "acme"}, "", "key_1"},
		{"or after them", []string{"rotate", "--tenant", "acme", "--grace", "1h", "key_2"}, "", "key_2"},
		{"ls takes no id", []string{"ls", "--tenant", "acme", "key_3"}, `unexpected argument "key_3"`, ""},
		{"an unknown command", []string{"delete", "--tenant", "acme"}, `unknown command "delete"`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseKeysFlags(tc.args[0], tc.args[1:], io.Discard, env)
			switch {
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want %q", err, tc.want)
			case tc.want == "" && err != nil:
				t.Fatalf("err = %v", err)
			case tc.want == "" && c.id != tc.id:
				t.Fatalf("id %q, want %q", c.id, tc.id)
			}
		})
	}
	t.Run("without an admin token it says so", func(t *testing.T) {
		var stderr strings.Builder
		code := runKeys(context.Background(), []string{"ls", "--tenant", "acme"}, io.Discard, &stderr, func(string) string { return "" })
		if code != 2 || !strings.Contains(stderr.String(), "--token") {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
	})
}
