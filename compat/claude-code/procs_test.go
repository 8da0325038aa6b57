package claudecode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/internal/binaries"
)

// buildBinaries builds cmd/ctxproxy and cmd/fakeapi (with -race when this
// test runs with it) into a temporary folder.
func buildBinaries(ctx context.Context, t *testing.T) (ctxproxy, fakeapi string) {
	t.Helper()
	dir := t.TempDir()
	ctxproxy, fakeapi = filepath.Join(dir, "ctxproxy"), filepath.Join(dir, "fakeapi")
	for out, pkg := range map[string]string{ctxproxy: binaries.Ctxproxy, fakeapi: binaries.Fakeapi} {
		if err := binaries.Build(ctx, out, pkg, binaries.Race); err != nil {
			t.Fatal(err)
		}
	}
	return ctxproxy, fakeapi
}

// startLogged runs bin, waits for the JSON log line whose msg is readyMsg and
// returns its addr field. The process is stopped (SIGTERM, then SIGKILL) when
// the test ends; the end of its log is shown if the test failed.
func startLogged(ctx context.Context, t *testing.T, readyMsg, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	setProcAttrs(cmd)
	// A race-built binary would sleep 1s at exit; a race it finds makes it exit 66.
	cmd.Env = append(cmd.Environ(), "GORACE=atexit_sleep_ms=0")
	p, err := binaries.Start(ctx, cmd, readyMsg, nil)
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(bin)
	t.Cleanup(func() {
		if code := p.Stop(); code != 0 && code != -1 {
			t.Errorf("%s exited %d", name, code)
		}
		if t.Failed() {
			lines := strings.Split(strings.TrimSuffix(p.Log(), "\n"), "\n")
			t.Logf("%s log:\n%s", name, strings.Join(lines[max(0, len(lines)-200):], "\n"))
		}
	})
	return p.Addr
}

// fakeControl talks to the fake upstream's /_fake/ endpoints.
type fakeControl struct{ base string }

func (f fakeControl) post(ctx context.Context, path string, body any, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return httpJSON(ctx, "POST", f.base+path, b, out)
}

func (f fakeControl) get(ctx context.Context, path string, out any) error {
	return httpJSON(ctx, "GET", f.base+path, nil, out)
}

func httpJSON(ctx context.Context, method, url string, body []byte, out any) error {
	req, err := newRequest(ctx, method, url, body)
	if err != nil {
		return err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, b)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	return nil
}
