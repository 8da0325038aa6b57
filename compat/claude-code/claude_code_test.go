// Package claudecode_test runs the real Claude Code CLI (npm
// @anthropic-ai/claude-code, pinned by package-lock.json in this folder)
// through the real ctxproxy binary in front of the fake upstream (the API
// reference's "What real clients send"), so `go test ./...` checks that Claude Code works through the
// proxy unchanged and gets memory and context editing from it.
//
// It installs the CLI with `npm ci` when node_modules is missing or does not
// hold the pinned version, builds cmd/ctxproxy and cmd/fakeapi (with -race
// when the test runs with it), starts both on 127.0.0.1 ephemeral ports with
// temporary policies and memory folder, and runs `claude -p` once per case
// with a fresh HOME. A recording pass-through between Claude Code and the
// proxy shows exactly what the client sent and received; the fake's request
// log shows what the upstream saw. Without npm it skips, except under
// CI=true, where it fails.
package claudecode_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/internal/npmlock"
	"github.com/ctxproxy/ctxproxy/stack"
)

const (
	// model fixes the request's shape: Claude Code's betas, thinking and
	// body differ by model (with this one: five betas, thinking enabled).
	model = "claude-sonnet-4-5"
	// Tenant keys (not real keys: the fake accepts any). A wrong key would
	// hang the test: Claude Code retries a 401 forever.
	keyDefault = "sk-ant-compat-claude-code-default"
	keyEnforce = "sk-ant-compat-claude-code-enforce"

	betaContextManagement = "context-management-2025-06-27"
	// The example policy's placeholder key hash, replaced by keyEnforce's.
	exampleKeyHash = "00624ba9a8de9455061a805f91f7ff3abea0895ae21ac3010e6ce4db27191611"

	// cliPackage is the npm package of the Claude Code CLI.
	cliPackage = "@anthropic-ai/claude-code"

	// vaultUpstreamKey is tenant cc-vault's own key, held by ctxproxy.
	vaultUpstreamKey = "sk-ant-compat-claude-code-vault"
	adminToken       = "compat-claude-code-admin"

	bashID   = "toolu_cc_bash"
	memoryID = "toolu_cc_memory"
)

// tenantDefaultEdits is what the proxy writes for the cc-default tenant when
// the client sent no edits of its own.
const tenantDefaultEdits = `[{"type":"clear_thinking_20251015","keep":{"type":"thinking_turns","value":1}},` +
	`{"type":"clear_tool_uses_20250919","trigger":{"type":"tool_uses","value":50},"keep":{"type":"tool_uses","value":3},"exclude_tools":["memory"]}]`

var httpClient = &http.Client{Timeout: 30 * time.Second}

func newRequest(ctx context.Context, method, url string, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}

// shape is how the fake's replies mix Claude Code's tool with memory.
type shape int

const (
	// mixed: one reply calls memory and Bash together; the proxy runs the
	// memory call and withholds it, Claude Code gets the Bash call.
	mixed shape = iota
	// loop: a memory-only reply the proxy answers itself (its memory loop
	// calls upstream again), then the Bash call, then the answer.
	loop
)

type ccCase struct {
	name     string
	key      string
	tenant   string // names the tenant's folder in the memory store
	shape    shape
	compress bool // the fake compresses its replies
	bearer   bool // the key goes as ANTHROPIC_AUTH_TOKEN (Authorization: Bearer)
	// upstreamKey, when set, is the tenant's own key that the upstream must
	// get in place of the client's (a ctxproxy key).
	upstreamKey string
	env         []string // extra environment for Claude Code
	wantEdits   string   // "client": Claude Code's own stand; "tenant": the tenant's
	// tenantEdits, when set, is the exact edits array expected upstream.
	tenantEdits string
}

func TestClaudeCode(t *testing.T) {
	npm := need(t, "npm")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	start := time.Now()
	claude := installClaudeCode(ctx, t, npm)
	ctxproxyBin, fakeBin := buildBinaries(ctx, t)
	t.Logf("claude ready and binaries built in %s", time.Since(start).Round(time.Millisecond))

	root := t.TempDir()
	polDir, memDir := writePolicies(t, root)

	fakeAddr := startLogged(ctx, t, "fakeapi listening", fakeBin, "--listen", "127.0.0.1:0", "--log-level", "info")
	// Taps on both sides of the proxy: what the client and the upstream
	// really sent and received, bytes under their content-encoding.
	upTap := startTap(t, "http://"+fakeAddr, true)
	proxyAddr := startLogged(ctx, t, "ctxproxy listening", ctxproxyBin, "serve",
		"--listen", "127.0.0.1:0",
		"--upstream", upTap.URL,
		"--policies", polDir,
		"--memory-dir", memDir,
		"--ledger", "file:"+filepath.Join(root, "ledger.jsonl"),
		"--admin-token", adminToken,
		"--log-level", "info")
	taps := taps{client: startTap(t, "http://"+proxyAddr, false), upstream: upTap}
	vaultKey := mintKey(ctx, t, "http://"+proxyAddr)
	fake := fakeControl{base: "http://" + fakeAddr}

	cases := []ccCase{
		{name: "default mode: Claude Code's own edits stand, ordered and memory-excluded",
			key: keyDefault, tenant: "cc-default", shape: mixed, wantEdits: "client"},
		{name: "enforce mode (the shipped example policy): the tenant's edits replace Claude Code's",
			key: keyEnforce, tenant: "claude-code", shape: loop, wantEdits: "tenant"},
		{name: "compressed replies (zstd, br, gzip): Claude Code gets a readable stream and memory still runs",
			key: keyDefault, tenant: "cc-default", shape: loop, compress: true, wantEdits: "client"},
		{name: "a Bearer token (ANTHROPIC_AUTH_TOKEN) finds the tenant and is forwarded as it came",
			key: keyEnforce, tenant: "claude-code", shape: mixed, bearer: true, wantEdits: "tenant"},
		{name: "a ctxproxy key as ANTHROPIC_AUTH_TOKEN: the upstream gets the tenant's own key instead",
			key: vaultKey, tenant: "cc-vault", shape: loop, bearer: true, upstreamKey: vaultUpstreamKey, wantEdits: "client"},
		{name: "experimental betas off: the proxy adds the context-management beta and the tenant's edits",
			key: keyDefault, tenant: "cc-default", shape: mixed, wantEdits: "tenant", tenantEdits: tenantDefaultEdits,
			env: []string{"CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS=1"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			runCase(ctx, t, c, i, claude, memDir, taps, fake)
		})
	}
}

// taps are the recording pass-throughs before and after the proxy.
type taps struct{ client, upstream *tap }

func runCase(ctx context.Context, t *testing.T, c ccCase, n int, claude, memDir string, tp taps, fake fakeControl) {
	memPath := fmt.Sprintf("/memories/claude-code-%d.md", n)
	memText := fmt.Sprintf("Claude Code ran `echo hi` through ctxproxy (case %d).\n", n)
	answer := fmt.Sprintf("FINAL ANSWER %d: echo printed hi and the note is saved.", n)
	replies, upstreamCalls := script(c, memPath, memText, answer)
	if err := fake.post(ctx, "/_fake/options", map[string]any{"compress": c.compress}, nil); err != nil {
		t.Fatal(err)
	}
	if err := fake.post(ctx, "/_fake/script", map[string]any{"reset": true, "replies": replies}, nil); err != nil {
		t.Fatal(err)
	}
	tp.client.take()
	tp.upstream.take()

	began := time.Now()
	env := append([]string{"ANTHROPIC_API_KEY=" + c.key}, c.env...)
	if c.bearer {
		env[0] = "ANTHROPIC_AUTH_TOKEN=" + c.key
	}
	res, stderr := runClaude(ctx, t, claude, tp.client.URL, env)
	exs, upExs := tp.client.take(), tp.upstream.take()
	var ups []fakeapi.RequestJSON
	if err := fake.get(ctx, "/_fake/requests?path=/v1/messages", &ups); err != nil {
		t.Fatal(err)
	}
	for i := range ups {
		ups[i].Body = json.RawMessage(compact(string(ups[i].Body))) // the fake indents it
	}
	t.Logf("claude -p took %s; %s", time.Since(began).Round(time.Millisecond), summary(exs, upExs, ups))
	defer func() {
		if t.Failed() {
			t.Logf("claude stderr:\n%s", stderr)
			for i, ex := range exs {
				t.Logf("client exchange %d: %s %s?%s -> %d %s", i, ex.Method, ex.Path, ex.Query, ex.Status, ex.RespHeader.Get("Content-Encoding"))
			}
			for i, u := range ups {
				t.Logf("upstream request %d: status %d outcome %s error %+v", i, u.Status, u.Outcome, u.Error)
			}
		}
	}()

	t.Run("the session ends with the scripted answer", func(t *testing.T) {
		if res.Result != answer || res.IsError || res.Subtype != "success" {
			t.Errorf("claude result = %q (is_error %v, subtype %q), want %q", res.Result, res.IsError, res.Subtype, answer)
		}
	})
	t.Run("the memory file is in the tenant's store", func(t *testing.T) {
		p := filepath.Join(memDir, c.tenant, strings.TrimPrefix(memPath, "/memories/"))
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("memory file: %v", err)
		}
		if string(b) != memText {
			t.Errorf("memory file holds %q, want %q", b, memText)
		}
	})
	t.Run("Claude Code sends only Messages calls and never sees a memory call", func(t *testing.T) {
		checkClient(t, exs)
	})
	t.Run("Claude Code ran its own Bash call", func(t *testing.T) {
		if len(exs) == 0 {
			t.Fatal("no requests")
		}
		r := findToolResult(exs[len(exs)-1].ReqBody, bashID)
		if !r.Exists() || r.Get("is_error").Bool() || !strings.Contains(r.Get("content").String(), "hi") {
			t.Errorf("last request's Bash tool_result = %s, want the output of echo hi", r.Raw)
		}
	})
	t.Run("the upstream sees the merged betas and ordered, memory-excluding edits", func(t *testing.T) {
		if len(ups) != upstreamCalls {
			t.Fatalf("upstream saw %d requests, want %d (Claude Code's %d and the memory loop's)", len(ups), upstreamCalls, len(exs))
		}
		if len(exs) == 0 {
			t.Fatal("no client requests")
		}
		checkUpstream(t, c, exs[0], ups)
	})
	if c.shape == loop {
		t.Run("the proxy answered the memory call upstream", func(t *testing.T) {
			r := findToolResult(ups[1].Body, memoryID)
			if !r.Exists() || r.Get("is_error").Bool() {
				t.Errorf("memory tool_result upstream = %s, want a successful one", r.Raw)
			}
		})
	}
	if c.compress {
		t.Run("the upstream answered zstd, br and gzip to the encodings the proxy asked for", func(t *testing.T) {
			var got []string
			for i, ex := range upExs {
				if ae := ex.ReqHeader.Get("Accept-Encoding"); !strings.Contains(ae, "zstd") || !strings.Contains(ae, "br") || !strings.Contains(ae, "gzip") {
					t.Errorf("upstream request %d: Accept-Encoding %q, want Claude Code's zstd, br and gzip", i, ae)
				}
				if _, err := decode(ex.RespHeader.Get("Content-Encoding"), ex.ReqHeader.Get("Accept-Encoding"), ex.RespBody); err != nil {
					t.Errorf("upstream reply %d: %v", i, err)
				}
				got = append(got, ex.RespHeader.Get("Content-Encoding"))
			}
			if want := []string{"zstd", "br", "gzip"}; !slices.Equal(got, want) {
				t.Errorf("upstream replies were encoded %q, want %q", got, want)
			}
		})
	}
}

// script is the fake's replies for c and the number of upstream calls they
// make. Reply encodings only matter with compression on: the first follows
// the Accept-Encoding (zstd from Claude Code's list), the others are forced.
func script(c ccCase, memPath, memText, answer string) ([]fakeapi.Reply, int) {
	bash := fakeapi.ToolUse(bashID, "Bash", map[string]any{"command": "echo hi", "description": "Print hi"})
	mem := fakeapi.ToolUse(memoryID, "memory", map[string]any{"command": "create", "path": memPath, "file_text": memText})
	think := fakeapi.Thinking("Run echo, and note it in memory.", "c2lnLWNvbXBhdC1jYw==")
	final := fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text(answer)}, StopReason: "end_turn"}
	switch c.shape {
	case mixed:
		return []fakeapi.Reply{
			{Content: []json.RawMessage{think, fakeapi.Text("Noting this, then running echo."), mem, bash}, StopReason: "tool_use"},
			final,
		}, 2
	default:
		first := fakeapi.Reply{Content: []json.RawMessage{think, mem}, StopReason: "tool_use"}
		second := fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("Noted. Now running echo."), bash}, StopReason: "tool_use"}
		if c.compress {
			second.Encoding, final.Encoding = "br", "gzip"
		}
		return []fakeapi.Reply{first, second, final}, 3
	}
}

// ccResult is the part of `claude -p --output-format json` the test reads.
type ccResult struct {
	Result  string `json:"result"`
	IsError bool   `json:"is_error"`
	Subtype string `json:"subtype"`
}

// runClaude runs one `claude -p` session with a fresh HOME and working
// folder and only the environment it needs, bounded by a timeout (Claude
// Code retries some errors for a long time), and kills whatever it started.
func runClaude(ctx context.Context, t *testing.T, claude, baseURL string, extraEnv []string) (ccResult, string) {
	t.Helper()
	res, stderr, err := runClaudeExit(ctx, t, claude, baseURL, extraEnv)
	if err != nil {
		t.Fatalf("claude -p: %v\nresult: %+v\nstderr:\n%s", err, res, stderr)
	}
	return res, stderr
}

// runClaudeExit is runClaude for a session that may end in an error: it
// returns the exit error beside the JSON result instead of failing on it.
func runClaudeExit(ctx context.Context, t *testing.T, claude, baseURL string, extraEnv []string) (ccResult, string, error) {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(rctx, claude, "-p", "Run `echo hi` with Bash, remember that you did, then answer.",
		"--output-format", "json", "--model", model, "--allowedTools", "Bash")
	cmd.Dir = t.TempDir()
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"ANTHROPIC_BASE_URL=" + baseURL,
		// Without it Claude Code also calls api.anthropic.com (settings,
		// telemetry) and HEADs the base URL.
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"NO_COLOR=1",
	}, extraEnv...)
	setProcAttrs(cmd)
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	_ = killGroup(cmd) // anything its tools left running
	if rctx.Err() != nil {
		t.Fatalf("claude -p did not finish in time (a 401 or repeated errors make it retry): %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var res ccResult
	if jerr := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &res); jerr != nil {
		t.Fatalf("claude -p --output-format json: %v (exit: %v)\nstdout:\n%s\nstderr:\n%s", jerr, err, stdout.String(), stderr.String())
	}
	return res, stderr.String(), err
}

// checkClient checks what Claude Code sent and received: Messages calls
// only; replies whose bytes match their content-encoding and form one
// well-formed stream each; no memory tool_use in them and none (nor a result
// for one) in its requests.
func checkClient(t *testing.T, exs []*exchange) {
	t.Helper()
	if len(exs) != 2 {
		t.Errorf("Claude Code made %d requests, want 2 (the task, then the Bash result)", len(exs))
	}
	for i, ex := range exs {
		if ex.Method != "POST" || ex.Path != "/v1/messages" || ex.Query != "beta=true" {
			t.Errorf("request %d: %s %s?%s, want POST /v1/messages?beta=true", i, ex.Method, ex.Path, ex.Query)
			continue
		}
		if ex.Status != 200 {
			t.Errorf("request %d: status %d: %s", i, ex.Status, ex.RespBody)
			continue
		}
		body, err := decode(ex.RespHeader.Get("Content-Encoding"), ex.ReqHeader.Get("Accept-Encoding"), ex.RespBody)
		if err != nil {
			t.Errorf("request %d: reply bytes do not match their content-encoding: %v", i, err)
			continue
		}
		if ct := ex.RespHeader.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
			t.Errorf("request %d: content-type %q, want text/event-stream", i, ct)
		}
		events, err := parseSSE(body)
		if err != nil {
			t.Errorf("request %d: %v", i, err)
			continue
		}
		var names []string
		for _, e := range events {
			names = append(names, e.name)
			if cb := gjson.GetBytes(e.data, "content_block"); e.name == "content_block_start" && cb.Get("type").Str == "tool_use" && cb.Get("name").Str == "memory" {
				t.Errorf("request %d: Claude Code was handed a memory tool_use: %s", i, e.data)
			}
		}
		if count(names, "message_start") != 1 || count(names, "message_stop") != 1 || names[len(names)-1] != "message_stop" {
			t.Errorf("request %d: events %v, want one message_start and a final message_stop", i, names)
		}
		memoryBlocks(t, fmt.Sprintf("request %d", i), ex.ReqBody)
	}
}

// memoryBlocks fails t if body's messages hold a memory tool_use, a
// tool_result for the memory call, or Claude Code's "No such tool" answer
// to a leaked one.
func memoryBlocks(t *testing.T, what string, body []byte) {
	t.Helper()
	gjson.GetBytes(body, "messages.#.content").ForEach(func(_, content gjson.Result) bool {
		content.ForEach(func(_, b gjson.Result) bool {
			switch {
			case b.Get("type").Str == "tool_use" && b.Get("name").Str == "memory",
				b.Get("type").Str == "tool_result" && b.Get("tool_use_id").Str == memoryID,
				strings.Contains(b.Raw, "No such tool available: memory"):
				t.Errorf("%s: Claude Code's request carries a memory block: %s", what, b.Raw)
			}
			return true
		})
		return true
	})
}

// checkUpstream checks every request the upstream saw: Claude Code's betas
// plus context-management once; the query kept; the memory tool added once
// to Claude Code's tools; edits with clear_thinking first and memory in every
// clear_tool_uses' exclude_tools; Claude Code's own edits or the tenant's,
// as c says.
func checkUpstream(t *testing.T, c ccCase, first *exchange, ups []fakeapi.RequestJSON) {
	t.Helper()
	clientBetas := splitBetas(first.ReqHeader.Values("Anthropic-Beta"))
	if !slices.Contains(clientBetas, "claude-code-20250219") {
		t.Errorf("Claude Code's betas %v lack claude-code-20250219: is this Claude Code?", clientBetas)
	}
	wantBetas := slices.Clone(clientBetas)
	if !slices.Contains(wantBetas, betaContextManagement) {
		wantBetas = append(wantBetas, betaContextManagement)
	}
	slices.Sort(wantBetas)
	clientEdits := gjson.GetBytes(first.ReqBody, "context_management.edits")
	clientTools := gjson.GetBytes(first.ReqBody, "tools.#").Int()
	if c.wantEdits == "client" && clientEdits.Raw != `[{"type":"clear_thinking_20251015","keep":"all"}]` {
		t.Errorf("Claude Code's own edits are %s, want its clear_thinking keep \"all\" (has the CLI changed?)", clientEdits.Raw)
	}
	for i, u := range ups {
		what := fmt.Sprintf("upstream request %d", i)
		if u.Status != 200 {
			t.Errorf("%s: the fake answered %d: %+v", what, u.Status, u.Error)
		}
		if u.Query != "beta=true" {
			t.Errorf("%s: query %q, want beta=true", what, u.Query)
		}
		apiKey, auth := u.Header.Get("X-Api-Key"), u.Header.Get("Authorization")
		switch {
		case c.upstreamKey != "":
			if apiKey != c.upstreamKey || auth != "" {
				t.Errorf("%s: x-api-key %q, authorization %q, want the tenant's own key as x-api-key only", what, apiKey, auth)
			}
		case c.bearer && (auth != "Bearer "+c.key || apiKey != "") || !c.bearer && (apiKey != c.key || auth != ""):
			t.Errorf("%s: x-api-key %q, authorization %q, want the client's credential as it came", what, apiKey, auth)
		}
		got := slices.Clone(u.Betas)
		slices.Sort(got)
		if !slices.Equal(got, wantBetas) {
			t.Errorf("%s: betas %v, want Claude Code's plus %s, each once: %v", what, u.Betas, betaContextManagement, wantBetas)
		}
		body := gjson.ParseBytes(u.Body)
		if th := body.Get("thinking.type").Str; th != "enabled" && th != "adaptive" {
			t.Errorf("%s: thinking %s, want it on as Claude Code sent it", what, body.Get("thinking").Raw)
		}
		if n := body.Get(`tools.#(type=="memory_20250818")#`).Array(); len(n) != 1 || body.Get("tools.#").Int() != clientTools+1 {
			t.Errorf("%s: %d tools with %d memory tools, want Claude Code's %d plus the memory tool", what, body.Get("tools.#").Int(), len(n), clientTools)
		}
		edits := body.Get("context_management.edits")
		checkEditRules(t, what, edits)
		switch {
		case c.wantEdits == "client":
			if compact(edits.Raw) != compact(clientEdits.Raw) {
				t.Errorf("%s: edits %s, want Claude Code's own %s to stand", what, edits.Raw, clientEdits.Raw)
			}
		case c.tenantEdits != "":
			if compact(edits.Raw) != compact(c.tenantEdits) {
				t.Errorf("%s: edits %s, want the tenant's %s", what, edits.Raw, c.tenantEdits)
			}
		default:
			// The shipped example: Claude Code sends no clear_tool_uses, so
			// one there is the tenant's; and its edits are not there as sent.
			if !edits.Get(`#(type=="clear_tool_uses_20250919")`).Exists() || compact(edits.Raw) == compact(clientEdits.Raw) {
				t.Errorf("%s: edits %s, want the tenant's in place of Claude Code's %s", what, edits.Raw, clientEdits.Raw)
			}
		}
	}
}

// checkEditRules checks the rules that hold in every mode but off:
// clear_thinking first, memory never cleared.
func checkEditRules(t *testing.T, what string, edits gjson.Result) {
	t.Helper()
	list := edits.Array()
	if len(list) == 0 {
		t.Errorf("%s: no context_management edits", what)
	}
	for i, e := range list {
		switch e.Get("type").Str {
		case "clear_thinking_20251015":
			if i != 0 {
				t.Errorf("%s: clear_thinking at edits[%d], want it first: %s", what, i, edits.Raw)
			}
		case "clear_tool_uses_20250919":
			var ex []string
			for _, n := range e.Get("exclude_tools").Array() {
				ex = append(ex, n.Str)
			}
			if count(ex, "memory") != 1 {
				t.Errorf("%s: clear_tool_uses exclude_tools %v, want memory in it once", what, ex)
			}
		}
	}
}

// summary says in one line what went over the wire, for -v.
func summary(exs, upExs []*exchange, ups []fakeapi.RequestJSON) string {
	var b strings.Builder
	if len(exs) > 0 {
		fmt.Fprintf(&b, "client betas %s, edits %s; ", exs[0].ReqHeader.Get("Anthropic-Beta"),
			gjson.GetBytes(exs[0].ReqBody, "context_management.edits").Raw)
	}
	for i, ex := range exs {
		fmt.Fprintf(&b, "client reply %d %q; ", i, ex.RespHeader.Get("Content-Encoding"))
	}
	for i, ex := range upExs {
		fmt.Fprintf(&b, "upstream reply %d %q; ", i, ex.RespHeader.Get("Content-Encoding"))
	}
	if len(ups) > 0 {
		fmt.Fprintf(&b, "upstream betas %v, edits %s", ups[0].Betas, gjson.GetBytes(ups[0].Body, "context_management.edits").Raw)
	}
	return b.String()
}

// findToolResult is the tool_result block for id in body's messages.
func findToolResult(body []byte, id string) gjson.Result {
	return gjson.GetBytes(body, fmt.Sprintf(`messages.#.content|@flatten|#(tool_use_id==%q)`, id))
}

type sseEvent struct {
	name string
	data []byte
}

// parseSSE splits an event stream into events, failing on data that is not
// JSON.
func parseSSE(b []byte) ([]sseEvent, error) {
	var out []sseEvent
	for _, chunk := range strings.Split(strings.ReplaceAll(string(b), "\r\n", "\n"), "\n\n") {
		if strings.TrimSpace(chunk) == "" {
			continue
		}
		var e sseEvent
		for _, line := range strings.Split(chunk, "\n") {
			switch {
			case strings.HasPrefix(line, "event:"):
				e.name = strings.TrimSpace(line[len("event:"):])
			case strings.HasPrefix(line, "data:"):
				e.data = append(e.data, strings.TrimSpace(line[len("data:"):])...)
			}
		}
		if !json.Valid(e.data) {
			return nil, fmt.Errorf("event %q: data is not JSON: %q", e.name, e.data)
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, errors.New("no events in the reply")
	}
	return out, nil
}

func splitBetas(values []string) []string {
	var out []string
	for _, v := range values {
		for _, b := range strings.Split(v, ",") {
			if b = strings.TrimSpace(b); b != "" {
				out = append(out, b)
			}
		}
	}
	return out
}

func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

func compact(s string) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		return s
	}
	return b.String()
}

// writePolicies writes root's policies folder with the tenants: default
// (everything off), cc-default (mode default, with edits of its own for
// clients that send none) and the shipped policies/claude-code.yaml.example
// with keyEnforce's hash, plus the shipped prices.
func writePolicies(t *testing.T, root string) (policiesDir, memoryDir string) {
	t.Helper()
	example, err := os.ReadFile("../../policies/claude-code.yaml.example")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(example, []byte(exampleKeyHash)) || !bytes.Contains(example, []byte("mode: enforce")) {
		t.Fatalf("policies/claude-code.yaml.example changed: want its placeholder key hash %s and mode: enforce", exampleKeyHash)
	}
	prices, err := os.ReadFile("../../tokens/builtin_prices.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"default.yaml": stack.DefaultPolicy,
		"cc-default.yaml": stack.TenantPolicy("cc-default", keyDefault, `context_management:
  mode: default
  clear_thinking:
    keep: { type: thinking_turns, value: 1 }
  clear_tool_uses:
    trigger: { type: tool_uses, value: 50 }
    keep: { type: tool_uses, value: 3 }
memory:
  mode: proxy
`),
		"claude-code.yaml": strings.Replace(string(example), exampleKeyHash, stack.KeyHash(keyEnforce), 1),
		// cc-vault: ctxproxy holds its Anthropic key; Claude Code gets a ctxproxy key.
		"cc-vault.yaml": `context_management:
  mode: default
memory:
  mode: proxy
upstream:
  api_key_file: cc-vault.key
tenant: cc-vault
`,
		"cc-vault.key": vaultUpstreamKey + "\n",
		"prices.yaml":  string(prices),
	}
	policiesDir, memoryDir, err = stack.Layout(root, files)
	if err != nil {
		t.Fatal(err)
	}
	return policiesDir, memoryDir
}

// need finds tool. Under -short, outside CI, the suite is skipped: its first
// run downloads Claude Code with npm, about 400 MB (the README says so);
// CI=true always runs it.
func need(t *testing.T, tool string) string {
	t.Helper()
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("-short: skipping the Claude Code compat suite (npm packages, ~400 MB); CI runs it")
	}
	p, err := exec.LookPath(tool)
	if err != nil {
		unavailable(t, "%s not found (install Node and npm)", tool)
	}
	return p
}

// unavailable fails the test under CI=true, where it must run, and skips it
// elsewhere (no npm, no registry, a platform without the native binary).
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := "the Claude Code compat test cannot run: " + fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// installClaudeCode makes node_modules hold the pinned CLI, running npm ci
// when it is missing or another version, and returns the claude binary.
func installClaudeCode(ctx context.Context, t *testing.T, npm string) string {
	t.Helper()
	want := lockedVersion(t)
	bin, err := filepath.Abs(filepath.Join("node_modules", ".bin", "claude"))
	if err != nil {
		t.Fatal(err)
	}
	if npmlock.Installed(".", cliPackage) == want && runsVersion(ctx, bin, want) == nil {
		return bin
	}
	began := time.Now()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		unavailable(t, "npm ci: %v\n%s", err, out)
	}
	t.Logf("npm ci took %s", time.Since(began).Round(time.Second))
	if err := runsVersion(ctx, bin, want); err != nil {
		// The postinstall puts the native binary over bin/claude.exe; npm
		// configured with ignore-scripts leaves a stub. Run it ourselves.
		t.Logf("claude does not run after npm ci (%v); running its install script", err)
		out, ierr := exec.CommandContext(ctx, "node", filepath.Join("node_modules", "@anthropic-ai", "claude-code", "install.cjs")).CombinedOutput()
		if err = runsVersion(ctx, bin, want); err != nil {
			unavailable(t, "claude %s does not run after npm ci and its install script (%v: %s): %v", want, ierr, out, err)
		}
	}
	return bin
}

// lockedVersion is the CLI version package-lock.json pins.
func lockedVersion(t *testing.T) string {
	t.Helper()
	v, err := npmlock.Pinned(".", cliPackage)
	if err != nil {
		t.Fatal(err)
	}
	if v == "" {
		t.Fatal("package-lock.json pins no " + cliPackage)
	}
	return v
}

// runsVersion runs `claude --version` and checks it prints want.
func runsVersion(ctx context.Context, bin, want string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	home, err := os.MkdirTemp("", "ctxproxy-cc-home-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(home)
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("claude --version: %w: %s", err, bytes.TrimSpace(out))
	}
	if !strings.HasPrefix(string(out), want+" ") {
		return fmt.Errorf("claude --version printed %q, want %s", bytes.TrimSpace(out), want)
	}
	return nil
}

// mintKey mints a ctxproxy key of tenant cc-vault as an operator would, with
// POST /admin/keys.
func mintKey(ctx context.Context, t *testing.T, proxyURL string) string {
	t.Helper()
	req, err := newRequest(ctx, http.MethodPost, proxyURL+"/admin/keys", []byte(`{"tenant":"cc-vault","name":"claude-code","user":"dev"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Key string `json:"key"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusCreated || !strings.HasPrefix(out.Key, "sk-ctx-") {
		t.Fatalf("mint key: %d %v", resp.StatusCode, err)
	}
	return out.Key
}
