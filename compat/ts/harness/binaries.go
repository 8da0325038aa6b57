package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// harnessPrices is the prices file the ctxproxy binary loads (prices.yaml in
// the policies folder; the policy loader skips it).
const harnessPrices = `models:
  - prefix: claude-sonnet-4-5
    input: 3
    output: 15
    cache_write: 3.75
    cache_read: 0.30
`

// runBinaries starts the fakeapi and ctxproxy binaries on 127.0.0.1:0, reads
// the addresses they log, and fills info. The returned func stops both.
func runBinaries(ctx context.Context, info *ready, ctxproxyBin, fakeapiBin, root string) (func(), error) {
	if err := os.WriteFile(filepath.Join(info.Policies, "prices.yaml"), []byte(harnessPrices), 0o644); err != nil {
		return nil, err
	}
	var procs []*exec.Cmd
	stopAll := func() {
		for i := len(procs) - 1; i >= 0; i-- {
			stopProc(procs[i])
		}
	}
	fake, addr, err := startLogged(ctx, "fakeapi listening", fakeapiBin, "--listen", "127.0.0.1:0", "--log-level", "info")
	if err != nil {
		return nil, err
	}
	procs = append(procs, fake)
	info.Fake = "http://" + addr
	px, addr, err := startLogged(ctx, "ctxproxy listening", ctxproxyBin, "serve",
		"--listen", "127.0.0.1:0",
		"--upstream", info.Fake,
		"--policies", info.Policies,
		"--memory-dir", info.MemoryDir,
		"--ledger", "file:"+filepath.Join(root, "ledger.jsonl"),
		"--log-level", "info")
	if err != nil {
		stopAll()
		return nil, err
	}
	procs = append(procs, px)
	info.Proxy = "http://" + addr
	return stopAll, nil
}

// startLogged runs bin and waits for the JSON log line whose msg is readyMsg,
// returning its addr field. The rest of the log is drained (and shown with
// HARNESS_DEBUG set).
func startLogged(ctx context.Context, readyMsg, bin string, args ...string) (*exec.Cmd, string, error) {
	cmd := exec.Command(bin, args...)
	setParentDeath(cmd)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, "", err
	}
	cmd.Stdout = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s: %w", bin, err)
	}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		found := false
		for sc.Scan() {
			if os.Getenv("HARNESS_DEBUG") != "" {
				fmt.Fprintln(os.Stderr, filepath.Base(bin)+":", sc.Text())
			}
			var l struct{ Msg, Addr string }
			if !found && json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == readyMsg && l.Addr != "" {
				found = true
				addrc <- l.Addr
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		close(addrc)
	}()
	select {
	case addr, ok := <-addrc:
		if ok {
			return cmd, addr, nil
		}
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	stopProc(cmd)
	return nil, "", fmt.Errorf("%s did not log %q", bin, readyMsg)
}

// stopProc asks the process to stop gracefully, then kills it.
func stopProc(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}
