// Command harness serves the TypeScript compat suite: a fake upstream
// (internal/fakeapi, scripted over its /_fake/ control endpoints) and a real
// ctxproxy in front of it, both on 127.0.0.1 ephemeral ports, with temporary
// tenant policies and memory folder. It prints one JSON line with the URLs,
// folders and tenant keys, then runs until its standard input closes (the
// node test that spawned it ended or died) or it gets SIGINT/SIGTERM, and
// removes its folders.
//
// With CTXPROXY_BIN and FAKEAPI_BIN set (paths of the built cmd/ctxproxy and
// cmd/fakeapi) it runs those binaries, as a user would, instead of serving
// both in process; "mode" in the JSON line says which.
//
//	go run ./compat/ts/harness
//	{"mode":"in-process","proxy":"http://127.0.0.1:41231","fake":"http://127.0.0.1:35511","memory_dir":"/tmp/...","keys":{"agent":"...","inject":"..."}}
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/proxy"
)

// Tenant keys the node tests use (not real keys; the fake accepts any).
var keys = map[string]string{
	"agent":  "sk-ant-compat-ts-agent",  // memory proxy, context editing enforced
	"inject": "sk-ant-compat-ts-inject", // memory inject: the client runs memory
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// The agent tenant clears old tool uses once there are more than two, so a
// short test conversation shows applied_edits.
func policies() map[string]string {
	return map[string]string{
		"default.yaml": "tenant: default\ncontext_management:\n  mode: off\nmemory:\n  mode: off\n",
		"agent.yaml": `tenant: agent
api_keys_sha256: ["` + sha(keys["agent"]) + `"]
context_management:
  mode: enforce
  clear_thinking:
    keep: all
  clear_tool_uses:
    trigger: { type: tool_uses, value: 2 }
    keep: { type: tool_uses, value: 1 }
memory:
  mode: proxy
  max_iterations: 8
`,
		"inject.yaml": `tenant: inject
api_keys_sha256: ["` + sha(keys["inject"]) + `"]
context_management:
  mode: default
  clear_tool_uses:
    trigger: { type: tool_uses, value: 2 }
    keep: { type: tool_uses, value: 1 }
memory:
  mode: inject
`,
	}
}

type ready struct {
	Mode      string            `json:"mode"`
	Proxy     string            `json:"proxy"`
	Fake      string            `json:"fake"`
	MemoryDir string            `json:"memory_dir"`
	Policies  string            `json:"policies_dir"`
	Keys      map[string]string `json:"keys"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	root, err := os.MkdirTemp("", "ctxproxy-compat-ts-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	polDir, memDir := filepath.Join(root, "policies"), filepath.Join(root, "memories")
	for _, d := range []string{polDir, memDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for name, body := range policies() {
		if err := os.WriteFile(filepath.Join(polDir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}

	info := ready{Mode: "in-process", MemoryDir: memDir, Policies: polDir, Keys: keys}
	if bin, fbin := os.Getenv("CTXPROXY_BIN"), os.Getenv("FAKEAPI_BIN"); bin != "" || fbin != "" {
		if bin == "" || fbin == "" {
			return errors.New("set both CTXPROXY_BIN and FAKEAPI_BIN, or neither")
		}
		info.Mode = "binaries"
		stopAll, err := runBinaries(ctx, &info, bin, fbin, root)
		if err != nil {
			return err
		}
		defer stopAll()
		return serveUntilDone(ctx, info)
	}

	log := zap.NewNop()
	if os.Getenv("HARNESS_DEBUG") != "" {
		log, _ = zap.NewDevelopment()
	}
	fake := fakeapi.New(fakeapi.WithLogger(log.Named("fake")))
	fakeURL, closeFake, err := listen(fake)
	if err != nil {
		return err
	}
	defer closeFake()

	pols, err := policy.NewStore(polDir, log)
	if err != nil {
		return fmt.Errorf("load policies: %w", err)
	}
	mem, err := memoryhook.NewFileStore(memDir)
	if err != nil {
		return fmt.Errorf("memory store: %w", err)
	}
	defer mem.Close()
	up, _ := url.Parse(fakeURL)
	srv, err := proxy.New(proxy.Config{Upstream: up, Policies: pols, Memory: mem, Log: log.Named("proxy")})
	if err != nil {
		return err
	}
	proxyURL, closeProxy, err := listen(srv)
	if err != nil {
		return err
	}
	defer closeProxy()

	info.Proxy, info.Fake = proxyURL, fakeURL
	return serveUntilDone(ctx, info)
}

// serveUntilDone announces info and waits for the parent to close our stdin
// (or die), or for a signal.
func serveUntilDone(ctx context.Context, info ready) error {
	line, _ := json.Marshal(info)
	fmt.Println(string(line))

	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	select {
	case <-ctx.Done():
	case <-stdinClosed:
	}
	return nil
}

// listen serves h on 127.0.0.1:0 and returns its base URL and a stop func.
func listen(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "harness: serve:", err)
		}
	}()
	return "http://" + ln.Addr().String(), func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if hs.Shutdown(sctx) != nil {
			hs.Close()
		}
	}, nil
}
