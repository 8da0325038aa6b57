package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

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

func TestCacheFlags(t *testing.T) {
	cases := []struct {
		name, cache, clock string
		on, wall, bad      bool
	}{
		{name: "off by default", cache: "off", clock: "manual"},
		{name: "on with the manual clock", cache: "on", clock: "manual", on: true},
		{name: "on with the wall clock", cache: "on", clock: "wall", on: true, wall: true},
		{name: "a bad cache value", cache: "yes", clock: "manual", bad: true},
		{name: "a bad clock", cache: "on", clock: "sundial", bad: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, clock, err := cacheFlags(c.cache, c.clock)
			if (err != nil) != c.bad {
				t.Fatalf("err %v", err)
			}
			if c.bad {
				return
			}
			if (o.Cache == fakeapi.On) != c.on || (len(clock) == 1) != c.wall {
				t.Errorf("options %+v, clock options %d", o, len(clock))
			}
			api := fakeapi.New(clock...)
			now := api.Now()
			nearWall := time.Since(now).Abs() < time.Hour
			if c.wall != nearWall || (!c.wall && !api.Now().Equal(now)) {
				t.Errorf("clock at %v (wall %v)", now, c.wall)
			}
		})
	}
	if err := run([]string{"--cache", "maybe"}); err == nil {
		t.Error("no error for --cache maybe")
	}
}

func TestLoadModelsReadsATable(t *testing.T) {
	cases := []struct {
		name, json string
		ids        []string
		fails      bool
	}{
		{"a list of models", `[{"id":"m1","lifecycle":"active","capabilities":null},{"id":"m2","lifecycle":"retired","aliases":["m2a"]}]`, []string{"m1", "m2"}, false},
		{"an empty list is a table without models", `[]`, nil, false},
		{"an entry without id", `[{"lifecycle":"active"}]`, nil, true},
		{"not a list", `{"id":"m1"}`, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "models.json")
			if err := os.WriteFile(path, []byte(c.json), 0o600); err != nil {
				t.Fatal(err)
			}
			ms, err := loadModels(path)
			if (err != nil) != c.fails {
				t.Fatalf("err %v", err)
			}
			if c.fails {
				return
			}
			if ms == nil {
				t.Fatal("a loaded table must not be nil (nil means the default table)")
			}
			var ids []string
			for _, m := range ms {
				ids = append(ids, m.ID)
			}
			if !slices.Equal(ids, c.ids) {
				t.Errorf("ids %v, want %v", ids, c.ids)
			}
		})
	}
}
