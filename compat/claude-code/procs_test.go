package claudecode_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// buildBinaries builds cmd/ctxproxy and cmd/fakeapi (with -race when this
// test runs with it) into a temporary folder.
func buildBinaries(ctx context.Context, t *testing.T) (ctxproxy, fakeapi string) {
	t.Helper()
	dir := t.TempDir()
	for _, pkg := range []string{"ctxproxy", "fakeapi"} {
		args := []string{"build", "-o", filepath.Join(dir, pkg)}
		if raceEnabled {
			args = append(args, "-race")
		}
		out, err := exec.CommandContext(ctx, "go", append(args, "../../cmd/"+pkg)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go build ./cmd/%s: %v\n%s", pkg, err, out)
		}
	}
	return filepath.Join(dir, "ctxproxy"), filepath.Join(dir, "fakeapi")
}

// logTail keeps the last lines a process logged, to show when a test fails.
type logTail struct {
	mu    sync.Mutex
	lines []string
}

func (l *logTail) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lines = append(l.lines, s); len(l.lines) > 200 {
		l.lines = l.lines[len(l.lines)-200:]
	}
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// startLogged runs bin, waits for the JSON log line whose msg is readyMsg and
// returns its addr field. The process is stopped (SIGTERM, then SIGKILL) when
// the test ends; its log is shown if the test failed.
func startLogged(ctx context.Context, t *testing.T, readyMsg, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	setProcAttrs(cmd)
	// A race-built binary would sleep 1s at exit; a race it finds makes it exit 66.
	cmd.Env = append(cmd.Environ(), "GORACE=atexit_sleep_ms=0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	name := filepath.Base(bin)
	var tail logTail
	addrc := make(chan string, 1)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		found := false
		for sc.Scan() {
			tail.add(sc.Text())
			var l struct{ Msg, Addr string }
			if !found && json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == readyMsg && l.Addr != "" {
				found = true
				addrc <- l.Addr
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() {
		if code := stopProc(cmd, drained); code != 0 && code != -1 {
			t.Errorf("%s exited %d", name, code)
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, tail.String())
		}
	})
	select {
	case addr := <-addrc:
		return addr
	case <-drained:
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	t.Fatalf("%s did not log %q", name, readyMsg)
	return ""
}

// stopProc asks the process to stop, kills it after 10s, and returns its
// exit code (-1 when killed by a signal).
func stopProc(cmd *exec.Cmd, drained <-chan struct{}) int {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		<-drained // Wait closes the pipe; read it to the end first
		_ = cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	return cmd.ProcessState.ExitCode()
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
