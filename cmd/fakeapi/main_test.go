package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
)

func TestLoadScriptAcceptsAListOrRepliesAndTurns(t *testing.T) {
	cases := map[string]struct {
		json    string
		pending int
	}{
		"a bare list is enqueued":          {`[{"text":"a"},{"text":"b"}]`, 2},
		"replies and turns are both taken": {`{"replies":[{"text":"a"}],"turns":[{"text":"t0"}]}`, 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "script.json")
			if err := os.WriteFile(path, []byte(tc.json), 0o600); err != nil {
				t.Fatal(err)
			}
			api := fakeapi.New()
			if err := loadScript(api, path); err != nil {
				t.Fatal(err)
			}
			if api.Pending() != tc.pending {
				t.Errorf("pending %d, want %d", api.Pending(), tc.pending)
			}
		})
	}
}

func TestLoadScriptNamesTheFileOnBadJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.json")
	_ = os.WriteFile(path, []byte(`[{"content":[{}]}]`), 0o600)
	if err := loadScript(fakeapi.New(), path); err == nil {
		t.Fatal("no error")
	}
}

func TestABadFlagIsAnError(t *testing.T) {
	if err := run([]string{"--log-level", "loud"}); err == nil {
		t.Fatal("no error for a bad log level")
	}
}
