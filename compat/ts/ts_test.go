// Package ts_test runs the TypeScript SDK compat suite (node --test in this
// folder) from go test, so `go test ./...` covers it. It installs the SDK from
// the lock file when node_modules is missing or stale, builds the Go harness
// the node tests spawn (with -race when this test runs with -race), and fails
// when the suite fails. Without node or npm it skips, except under CI=true,
// where it fails.
package ts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func need(t *testing.T, tool string) string {
	t.Helper()
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
	var lock struct {
		Packages map[string]struct{ Version string } `json:"packages"`
	}
	b, err := os.ReadFile("package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		t.Fatalf("package-lock.json: %v", err)
	}
	want := lock.Packages["node_modules/@anthropic-ai/sdk"].Version
	var pkg struct{ Version string }
	b, err = os.ReadFile(filepath.Join("node_modules", "@anthropic-ai", "sdk", "package.json"))
	if err != nil || json.Unmarshal(b, &pkg) != nil {
		return false
	}
	return want != "" && pkg.Version == want
}

func TestTypeScriptSDKSuite(t *testing.T) {
	node := need(t, "node")
	npm := need(t, "npm")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	if !installedMatchesLock(t) {
		out, err := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund").CombinedOutput()
		if err != nil {
			t.Fatalf("npm ci: %v\n%s", err, out)
		}
	}

	harness := filepath.Join(t.TempDir(), "harness")
	args := []string{"build", "-o", harness}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.CommandContext(ctx, "go", append(args, "./harness")...).CombinedOutput(); err != nil {
		t.Fatalf("go build harness: %v\n%s", err, out)
	}

	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "test/")
	// A race-built harness would sleep 1s at every exit; a race it finds makes it exit 66, failing its test.
	cmd.Env = append(os.Environ(), "COMPAT_HARNESS="+harness, "GORACE=atexit_sleep_ms=0", "NO_COLOR=1", "FORCE_COLOR=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
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
