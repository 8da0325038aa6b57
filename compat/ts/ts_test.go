// Package ts_test runs the TypeScript SDK compat suite (node --test in this
// folder) from go test, so `go test ./...` covers it. It installs the SDK from
// the lock file when node_modules is missing or stale, builds the real
// ctxproxy and fakeapi binaries and the harness that runs them for the node
// tests (all with -race when this test runs with -race), and fails when the
// suite fails. Without node or npm it skips, except under CI=true, where it
// fails. If cmd/ctxproxy does not build (outside CI) the suite runs against
// the harness's in-process proxy instead, and says so.
package ts_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/binaries"
	"github.com/ctxproxy/ctxproxy/internal/npmlock"
)

// need finds tool. Under -short, outside CI, the suite is skipped: its first
// run downloads the SDK with npm (the README says so); CI=true always runs it.
func need(t *testing.T, tool string) string {
	t.Helper()
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("-short: skipping the TypeScript compat suite (npm packages); CI runs it")
	}
	p, err := exec.LookPath(tool)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found: the TypeScript compat suite cannot run (install Node 20+)", tool)
		}
		t.Skipf("%s not found; skipping the TypeScript compat suite", tool)
	}
	return p
}

// installedMatchesLock reports whether node_modules holds the SDK version the
// lock file pins.
func installedMatchesLock(t *testing.T) bool {
	t.Helper()
	want, err := npmlock.Pinned(".", "@anthropic-ai/sdk")
	if err != nil {
		t.Fatal(err)
	}
	return want != "" && npmlock.Installed(".", "@anthropic-ai/sdk") == want
}

// installSDK installs the SDK from the lock file unless node_modules holds it.
func installSDK(ctx context.Context, t *testing.T) {
	t.Helper()
	npm := need(t, "npm")
	if !installedMatchesLock(t) {
		out, err := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund").CombinedOutput()
		if err != nil {
			t.Fatalf("npm ci: %v\n%s", err, out)
		}
	}
}

func TestTypeScriptSDKSuite(t *testing.T) {
	node := need(t, "node")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	installSDK(ctx, t)

	bin := t.TempDir()
	build := func(out, pkg string) error { return binaries.Build(ctx, filepath.Join(bin, out), pkg, binaries.Race) }
	if err := build("harness", "./harness"); err != nil {
		t.Fatal(err)
	}
	env := []string{"COMPAT_HARNESS=" + filepath.Join(bin, "harness")}
	err := build("fakeapi", binaries.Fakeapi)
	if err == nil {
		err = build("ctxproxy", binaries.Ctxproxy)
	}
	switch {
	case err == nil:
		env = append(env, "CTXPROXY_BIN="+filepath.Join(bin, "ctxproxy"), "FAKEAPI_BIN="+filepath.Join(bin, "fakeapi"))
	case os.Getenv("CI") == "true":
		t.Fatal(err)
	default:
		t.Logf("running against the in-process proxy: the binaries did not build: %v", err)
	}

	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "test/")
	// A race-built harness would sleep 1s at every exit; a race it finds makes it exit 66, failing its test.
	cmd.Env = append(append(os.Environ(), env...), "GORACE=atexit_sleep_ms=0", "NO_COLOR=1", "FORCE_COLOR=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("node --test: %v\n%s", err, out.String())
	}
	// Show the suite's summary; with -v the whole report.
	if testing.Verbose() {
		t.Log("\n" + out.String())
	} else {
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		t.Log("\n" + strings.Join(lines[max(0, len(lines)-8):], "\n"))
	}
	if !strings.Contains(out.String(), "ℹ fail 0") {
		t.Fatalf("node --test reported failures:\n%s", out.String())
	}
}
