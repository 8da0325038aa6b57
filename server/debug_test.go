package server

import (
	"strings"
	"testing"
)

func TestRedactArgs(t *testing.T) {
	for _, tc := range []struct{ name, args, want string }{
		{"the value after the flag", "ctxproxy --admin-token tok --listen :1", "ctxproxy --admin-token [redacted] --listen :1"},
		{"the value after =", "ctxproxy serve -admin-token=tok", "ctxproxy serve -admin-token=[redacted]"},
		{"a flag as the last argument", "ctxproxy --admin-token", "ctxproxy --admin-token"},
		{"other flags and positional words stay", "ctxproxy --upstream admin-token", "ctxproxy --upstream admin-token"},
		{"nothing after --", "ctxproxy -- --admin-token tok", "ctxproxy -- --admin-token tok"},
		{"a URL's password, flag and value apart", "ctxproxy --upstream http://u:pw@h:1/p", "ctxproxy --upstream http://u:xxxxx@h:1/p"},
		{"a URL's password after =", "ctxproxy --ledger=postgres://u:pw@db/x?sslmode=disable", "ctxproxy --ledger=postgres://u:xxxxx@db/x?sslmode=disable"},
		{"a URL without a password stays", "ctxproxy --ratelimit-store redis://db:6379/0", "ctxproxy --ratelimit-store redis://db:6379/0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(redactArgs(strings.Fields(tc.args)), " "); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
