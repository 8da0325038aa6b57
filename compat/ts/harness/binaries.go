package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ctxproxy/ctxproxy/internal/binaries"
	"github.com/ctxproxy/ctxproxy/stack"
)

// runBinaries starts the fakeapi and ctxproxy binaries on 127.0.0.1:0, reads
// the addresses they log, and fills info. The returned func stops both.
func runBinaries(ctx context.Context, info *ready, ctxproxyBin, fakeapiBin, root string) (func(), error) {
	// The ctxproxy binary loads prices.yaml from the policies folder (the
	// policy loader skips it).
	if err := os.WriteFile(filepath.Join(info.Policies, "prices.yaml"), []byte(stack.ListPrices), 0o644); err != nil {
		return nil, err
	}
	var procs []*binaries.Process
	stopAll := func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].Stop()
		}
	}
	fake, err := startLogged(ctx, "fakeapi listening", fakeapiBin, "--listen", "127.0.0.1:0", "--log-level", "info")
	if err != nil {
		return nil, err
	}
	procs = append(procs, fake)
	info.Fake = "http://" + fake.Addr
	adminToken := "compat-ts-admin-" + strconv.Itoa(os.Getpid())
	px, err := startLogged(ctx, "ctxproxy listening", ctxproxyBin, "serve",
		"--listen", "127.0.0.1:0",
		"--upstream", info.Fake,
		"--policies", info.Policies,
		"--memory-dir", info.MemoryDir,
		"--ledger", "file:"+filepath.Join(root, "ledger.jsonl"),
		"--memory-audit", filepath.Join(root, "memory-audit.jsonl"),
		"--admin-token", adminToken,
		"--log-level", "info")
	if err != nil {
		stopAll()
		return nil, err
	}
	procs = append(procs, px)
	info.Proxy = "http://" + px.Addr
	vault, err := mintKey(ctx, info.Proxy, adminToken)
	if err != nil {
		stopAll()
		return nil, err
	}
	info.Keys = withKeys(vault)
	return stopAll, nil
}

// mintKey mints the vault's ctxproxy key as an operator would: POST
// /admin/keys with the admin token.
func mintKey(ctx context.Context, proxyURL, adminToken string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, proxyURL+"/admin/keys",
		strings.NewReader(`{"tenant":"vault","name":"compat-ts","user":"node"}`))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("mint key: %w", err)
	}
	defer resp.Body.Close()
	var out struct {
		Key string `json:"key"`
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &out) != nil || out.Key == "" {
		return "", fmt.Errorf("mint key: %d %s", resp.StatusCode, b)
	}
	return out.Key, nil
}

// startLogged runs bin until it logs readyMsg; its stdout goes to our
// stderr (our stdout is the ready line), its log too with HARNESS_DEBUG set.
func startLogged(ctx context.Context, readyMsg, bin string, args ...string) (*binaries.Process, error) {
	cmd := exec.Command(bin, args...)
	setParentDeath(cmd)
	cmd.Stdout = os.Stderr
	var echo io.Writer
	if os.Getenv("HARNESS_DEBUG") != "" {
		echo = os.Stderr
	}
	return binaries.Start(ctx, cmd, readyMsg, echo)
}
