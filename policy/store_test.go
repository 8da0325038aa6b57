package policy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ctxproxy/ctxproxy/internal/kubevolume"
)

// waitFor is a fail-safe for event-driven waits, not a timing assertion.
const waitFor = 30 * time.Second

func newTestStore(t *testing.T, files map[string]string) (*Store, string, *observer.ObservedLogs) {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		write(t, dir, name, content)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	s, err := NewStore(dir, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	return s, dir, logs
}

func TestNewStoreFailsOnBadFolder(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.yaml", "tenant: A\n")
	if _, err := NewStore(dir, nil); err == nil {
		t.Fatal("NewStore accepted a bad folder")
	}
	if _, err := NewStore(filepath.Join(dir, "missing"), nil); err == nil {
		t.Fatal("NewStore accepted a missing folder")
	}
}

func TestReloadRefusesBadSetAndKeepsLastGood(t *testing.T) {
	s, dir, logs := newTestStore(t, map[string]string{"acme.yaml": "tenant: acme\napi_keys_sha256: [" + hexHash("k") + "]\n"})
	good := s.Current()

	write(t, dir, "acme.yaml", "tenant: acme\nmemory: {mode: sometimes}\n")
	err := s.Reload()
	var le LoadErrors
	if !errors.As(err, &le) || len(le) != 1 || le[0].Line != 2 {
		t.Fatalf("Reload of a bad folder: got %v, want one LoadError on line 2", err)
	}
	if s.Current() != good {
		t.Fatal("a failed reload replaced the set")
	}
	if p, ok := s.Current().Lookup("k"); !ok || p.Tenant != "acme" {
		t.Fatal("the last good set no longer answers")
	}
	if logs.FilterMessageSnippet("reload refused").Len() != 1 {
		t.Fatalf("want one log line for the refused reload, got %v", logs.All())
	}
	if st := s.LastReload(); st.OK() || len(st.Problems) != 1 || !strings.Contains(st.Problems[0].Error(), "acme.yaml:2") {
		t.Fatalf("LastReload after a refused reload = %+v, want the problem at acme.yaml:2", st)
	}

	write(t, dir, "acme.yaml", "tenant: acme\nmemory: {mode: proxy}\n")
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if s.Current() == good || s.Current().Tenant("acme").Memory.Mode != MemoryProxy {
		t.Fatal("a good reload was not applied")
	}
	if st := s.LastReload(); !st.OK() {
		t.Fatalf("LastReload after a good reload = %+v", st)
	}
	for _, e := range logs.All() {
		for _, f := range e.Context {
			if f.String == "k" {
				t.Fatal("a log line holds an API key")
			}
		}
	}
}

// watchStore starts Watch and returns a channel that receives every reload's result.
func watchStore(t *testing.T, s *Store) <-chan error {
	t.Helper()
	results := make(chan error, 100)
	started := make(chan struct{})
	s.started = func() { close(started) }
	s.reloaded = func(err error) { results <- err }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	})
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("Watch: %v", err)
	}
	return results
}

// awaitReload waits until a reload makes cond true.
func awaitReload(t *testing.T, results <-chan error, cond func() bool) {
	t.Helper()
	timeout := time.After(waitFor)
	for !cond() {
		select {
		case <-results:
		case <-timeout:
			t.Fatal("the change was never picked up")
		}
	}
}

func TestWatchPicksUpAChangeMadeBeforeItStarted(t *testing.T) {
	s, dir, _ := newTestStore(t, map[string]string{"default.yaml": "tenant: default\n"})
	write(t, dir, "acme.yaml", "tenant: acme\napi_keys_sha256: ["+hexHash("ka")+"]\n")
	results := watchStore(t, s)
	awaitReload(t, results, func() bool { return s.Current().Tenant("acme") != nil })
}

func TestWatchPicksUpChanges(t *testing.T) {
	s, dir, _ := newTestStore(t, map[string]string{"default.yaml": "tenant: default\n"})
	results := watchStore(t, s)

	t.Run("a new file", func(t *testing.T) {
		write(t, dir, "acme.yaml", "tenant: acme\napi_keys_sha256: ["+hexHash("ka")+"]\n")
		awaitReload(t, results, func() bool { return s.Current().Tenant("acme") != nil })
	})
	t.Run("an editor's rename over the file", func(t *testing.T) {
		tmp := filepath.Join(dir, ".acme.yaml.swp")
		if err := os.WriteFile(tmp, []byte("tenant: acme\nmemory: {mode: inject}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "acme.yaml")); err != nil {
			t.Fatal(err)
		}
		awaitReload(t, results, func() bool {
			p := s.Current().Tenant("acme")
			return p != nil && p.Memory.Mode == MemoryInject
		})
	})
	t.Run("a broken save keeps the old set, the fix is picked up", func(t *testing.T) {
		write(t, dir, "acme.yaml", "tenant: acme\nmemory: [\n")
		timeout := time.After(waitFor)
		for failed := false; !failed; {
			select {
			case err := <-results:
				failed = err != nil
			case <-timeout:
				t.Fatal("no failed reload reported")
			}
		}
		if p := s.Current().Tenant("acme"); p == nil || p.Memory.Mode != MemoryInject {
			t.Fatal("a broken file replaced the set")
		}
		write(t, dir, "acme.yaml", "tenant: acme\nmemory: {mode: off}\n")
		awaitReload(t, results, func() bool { return s.Current().Tenant("acme").Memory.Mode == MemoryOff })
	})
	t.Run("a removed file", func(t *testing.T) {
		os.Remove(filepath.Join(dir, "acme.yaml"))
		awaitReload(t, results, func() bool { return s.Current().Tenant("acme") == nil })
	})
	t.Run("a file written without pause still gets reloaded", func(t *testing.T) {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // a noisy neighbour: never quiet for the debounce period
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					_ = os.WriteFile(filepath.Join(dir, "noise.log"), []byte("x"), 0o644)
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
		write(t, dir, "globex.yaml", "tenant: globex\n")
		awaitReload(t, results, func() bool { return s.Current().Tenant("globex") != nil })
		close(stop)
		wg.Wait()
	})
}

func TestConcurrentReadsDuringReloads(t *testing.T) {
	s, dir, _ := newTestStore(t, map[string]string{
		"default.yaml": "tenant: default\nmemory: {mode: proxy}\n",
		"acme.yaml":    "tenant: acme\napi_keys_sha256: [" + hexHash("ka") + "]\n",
	})
	first := s.Current()
	firstSummary := first.Tenant("acme").Summary()

	var wg sync.WaitGroup
	stop := make(chan struct{})
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				set := s.Current()
				p, ok := set.Lookup("ka")
				if !ok || p.Tenant != "acme" {
					t.Error("a reader saw a set without acme")
					return
				}
				if _, _, err := p.Rewrite(body, nil); err != nil {
					t.Error(err)
					return
				}
				_ = set.Tenants()
			}
		}()
	}
	modes := []string{"proxy", "inject", "off"}
	for i := range 30 {
		write(t, dir, "acme.yaml", "tenant: acme\napi_keys_sha256: ["+hexHash("ka")+"]\nmemory: {mode: "+modes[i%3]+"}\n")
		if err := s.Reload(); err != nil {
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
	if first.Tenant("acme").Summary() != firstSummary {
		t.Fatal("a Set changed after it was published")
	}
}

// A reload that changes a tenant's limits writes one audit line per tenant with what the limits
// were and are; tenants whose limits did not change get none.
func TestReloadAuditsLimitChanges(t *testing.T) {
	st, dir, logs := newTestStore(t, map[string]string{
		"acme.yaml":  "tenant: acme\nlimits:\n  spend: [{period: daily, usd: 50}]\n",
		"beta.yaml":  "tenant: beta\nlimits:\n  requests_per_minute: 10\n",
		"plain.yaml": "tenant: plain\n",
		"gone.yaml":  "tenant: gone\nlimits:\n  requests_per_minute: 5\n",
	})
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("acme.yaml", "tenant: acme\nlimits:\n  spend: [{period: daily, usd: 75}]\n")
	write("beta.yaml", "tenant: beta\nmemory: {mode: inject}\nlimits:\n  requests_per_minute: 10\n")
	write("plain.yaml", "tenant: plain\nlimits:\n  input_tokens_per_minute: 1000\n")
	write("new.yaml", "tenant: new\nmemory: {mode: inject}\n")
	if err := os.Remove(filepath.Join(dir, "gone.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := st.Reload(); err != nil {
		t.Fatal(err)
	}
	got := map[string][2]string{}
	for _, e := range logs.FilterMessage("limits changed").All() {
		f := e.ContextMap()
		if f["audit"] != "limits" || f["at"] == nil {
			t.Errorf("audit line without its audit and at fields: %v", f)
		}
		got[f["tenant"].(string)] = [2]string{f["before"].(string), f["after"].(string)}
	}
	want := map[string][2]string{
		"acme":  {"daily $50, on_store_error open, reserve_output_tokens 4096", "daily $75, on_store_error open, reserve_output_tokens 4096"},
		"plain": {"none", "input_tokens_per_minute 1000, on_store_error open"},
		"gone":  {"requests_per_minute 5, on_store_error open", "none"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("audit lines:\n got %v\nwant %v", got, want)
	}
}

// A ConfigMap volume is updated by swapping its ..data symlink (internal/kubevolume does what the
// kubelet does); the watcher must pick the new files up without a restart.
func TestWatchPicksUpAConfigMapUpdate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	acme := func(mode string) string {
		return "tenant: acme\napi_keys_sha256: [" + hexHash("ka") + "]\nmemory: {mode: " + mode + "}\n"
	}
	if err := kubevolume.Write(dir, map[string]string{"default.yaml": "tenant: default\n", "acme.yaml": acme("proxy")}); err != nil {
		t.Fatal(err)
	}
	s, err := NewStore(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Current().Tenant("acme").Memory.Mode != MemoryProxy {
		t.Fatal("the mounted files were not loaded through their ..data symlinks")
	}
	results := watchStore(t, s)

	t.Run("a changed file", func(t *testing.T) {
		if err := kubevolume.Write(dir, map[string]string{"default.yaml": "tenant: default\n", "acme.yaml": acme("inject")}); err != nil {
			t.Fatal(err)
		}
		awaitReload(t, results, func() bool { return s.Current().Tenant("acme").Memory.Mode == MemoryInject })
	})
	t.Run("a file added and one removed", func(t *testing.T) {
		if err := kubevolume.Write(dir, map[string]string{"default.yaml": "tenant: default\n", "globex.yaml": "tenant: globex\n"}); err != nil {
			t.Fatal(err)
		}
		awaitReload(t, results, func() bool { return s.Current().Tenant("globex") != nil && s.Current().Tenant("acme") == nil })
	})
	t.Run("a broken update keeps the last good set", func(t *testing.T) {
		before := s.Current()
		if err := kubevolume.Write(dir, map[string]string{"default.yaml": "tenant: default\n", "globex.yaml": "tenant: globex\nmemory: [\n"}); err != nil {
			t.Fatal(err)
		}
		timeout := time.After(waitFor)
		for failed := false; !failed; {
			select {
			case err := <-results:
				failed = err != nil
			case <-timeout:
				t.Fatal("no failed reload reported")
			}
		}
		if s.Current() != before {
			t.Fatal("a broken update replaced the set")
		}
	})
}
