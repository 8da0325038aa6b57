package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/stack"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// The demo: a scripted agent session against the fake upstream, through a
// real in-process ctxproxy, for a newcomer without an API key. Nothing leaves
// the machine; both servers listen on 127.0.0.1 ephemeral ports.

const (
	demoKey    = "sk-ctxproxy-demo-key" // not a real key; the fake accepts any
	demoTenant = "demo"
	demoModel  = "claude-sonnet-4-5"
	// demoCompactModel compacts (claude-sonnet-4-5 does not: the policy gives
	// it no compact edit).
	demoCompactModel = "claude-sonnet-4-6"
)

// demoPolicy (the demo tenant's policy below its tenant and key lines):
// memory run by the proxy, and thresholds low enough that a
// short session shows context editing (more than 2 tool uses in the prompt:
// clear all but the most recent one).
const demoPolicy = `context_management:
  mode: enforce
  clear_tool_uses:
    trigger: { type: tool_uses, value: 2 }
    keep: { type: tool_uses, value: 1 }
  compact:
    trigger: { type: input_tokens, value: 50000 }
memory:
  mode: proxy
  max_iterations: 5
`

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fl := flag.NewFlagSet("ctxproxy demo", flag.ContinueOnError)
	fl.SetOutput(stderr)
	dir := fl.String("dir", "", "keep the demo's policy, memory files and ledger in this folder (default: a temporary folder, removed afterwards)")
	prices := fl.String("prices", "", "prices file over the built-in price table for the cost report (default: policies/prices.yaml if present)")
	logLevel := fl.String("log-level", "warn", "ctxproxy's log level (logs go to stderr)")
	fl.Usage = func() {
		fmt.Fprintln(stderr, "usage: ctxproxy demo [--dir DIR] [--prices FILE] [--log-level LEVEL]")
		fmt.Fprintln(stderr, "Runs a scripted agent session through a real ctxproxy in front of a fake Anthropic API (no API key needed)")
		fmt.Fprintln(stderr, "and prints each step, the memory files, the context edits and the cost report.")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "ctxproxy demo: unexpected argument %q\n", fl.Arg(0))
		return 2
	}
	if err := demo(ctx, demoOptions{dir: *dir, prices: *prices, logLevel: *logLevel}, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "ctxproxy demo:", err)
		return 1
	}
	return 0
}

type demoOptions struct {
	dir, prices, logLevel string
}

func demo(ctx context.Context, o demoOptions, out, logOut io.Writer) error {
	root := o.dir
	if root == "" {
		tmp, err := os.MkdirTemp("", "ctxproxy-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		root = tmp
	}
	memDir, ledgerPath := filepath.Join(root, "memories"), filepath.Join(root, stack.LedgerFile)
	// A second run in the same --dir starts from an empty memory and ledger.
	_ = os.RemoveAll(filepath.Join(memDir, demoTenant))
	_ = os.Remove(ledgerPath)

	log, err := newLogger(o.logLevel, logOut)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	pricesPath, pricesFrom, err := demoLoadPrices(o.prices)
	if err != nil {
		return err
	}
	st, err := stack.Start(stack.Config{
		Dir:      root,
		Policies: map[string]string{"demo.yaml": stack.TenantPolicy(demoTenant, demoKey, demoPolicy)},
		Prices:   pricesPath,
		Log:      log,
	})
	if err != nil {
		return err
	}
	defer st.Close()
	fake, fakeURL, proxyURL := st.Fake, st.FakeURL, st.ProxyURL
	fake.SetResponder(demoAgent)

	p := &demoPrinter{w: out}
	p.f("ctxproxy demo: a scripted agent session through a real ctxproxy, in front of a fake Anthropic API.\n")
	p.f("No API key needed; nothing leaves this machine.\n\n")
	p.f("  fake upstream  %s (answers as a scripted model would)\n", fakeURL)
	p.f("  ctxproxy       %s\n", proxyURL)
	p.f("  tenant         %s: memory.mode proxy (ctxproxy runs the memory tool), context editing enforced:\n", demoTenant)
	p.f("                 clear_tool_uses once the prompt holds more than 2 tool uses, keeping the last 1,\n")
	p.f("                 and server-side compaction (compact_20260112) past 50,000 input tokens, for models that compact\n")
	p.f("  memory folder  %s\n", filepath.Join(memDir, demoTenant))
	p.f("  prices         %s\n", pricesFrom)
	p.f("Your agent would only change its base URL to %s.\n", proxyURL)

	c := &demoClient{base: proxyURL, fake: fake, p: p}
	if err := c.conversation(ctx, "Conversation 1: the user states a preference", demoConv1Prompt); err != nil {
		return err
	}
	if err := c.conversation(ctx, "Conversation 2: a new conversation; the agent books a flight and recalls the preference from memory", demoConv2Prompt); err != nil {
		return err
	}
	c.model = demoCompactModel
	if err := c.conversation(ctx, "Conversation 3: a long log investigation on "+demoCompactModel+"; past 50,000 input tokens the API compacts it", demoConv3Prompt); err != nil {
		return err
	}

	if err := demoCacheSession(ctx, root, pricesPath, p, log); err != nil {
		return err
	}

	// Memory files as ctxproxy stored them.
	p.f("\nMemory files (tenant %s, stored by ctxproxy under %s):\n", demoTenant, filepath.Join(memDir, demoTenant))
	files, err := demoFiles(filepath.Join(memDir, demoTenant))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		p.f("  (none)\n")
	}
	for _, f := range files {
		p.f("  /memories/%s\n", f.rel)
		for _, line := range strings.Split(strings.TrimRight(f.text, "\n"), "\n") {
			p.f("    | %s\n", line)
		}
	}

	// Context edits the upstream applied, as the client saw them.
	p.f("\nContext edits applied (context_management.applied_edits):\n")
	if len(c.edits) == 0 {
		p.f("  (none)\n")
	}
	var clearedUses, clearedTokens int64
	for _, e := range c.edits {
		p.f("  step %-2d %s: cleared %d tool uses, %s input tokens\n", e.step, e.typ, e.uses, demoCommas(e.tokens))
		clearedUses += e.uses
		clearedTokens += e.tokens
	}
	if len(c.edits) > 0 {
		p.f("  total: %d tool uses, %s input tokens the model did not have to read again\n", clearedUses, demoCommas(clearedTokens))
	}
	p.f("\nCompactions (a compaction block first in the reply, its cost in usage.iterations):\n")
	if len(c.compactions) == 0 {
		p.f("  (none)\n")
	}
	for _, cp := range c.compactions {
		p.f("  step %-2d the API summarized %s input tokens into %s output tokens; the next request read %s\n",
			cp.step, demoCommas(cp.in), demoCommas(cp.out), demoCommas(cp.next))
	}

	// Cost report from the ledger ctxproxy wrote.
	st.Close() // every call is recorded before the handler returns; Close flushes the ledger
	calls, err := demoLedger(ctx, ledgerPath)
	if err != nil {
		return err
	}
	p.f("\nCost report (%s, from the ledger ctxproxy wrote):\n", demoPlural(len(calls), "upstream call"))
	var table bytes.Buffer
	if err := tokens.WriteReportTable(&table, tokens.BuildReport(calls, tokens.GroupByModel)); err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimRight(table.String(), "\n"), "\n") {
		p.f("  %s\n", line)
	}
	if o.dir == "" {
		p.f("\nThe demo's files were in a temporary folder, now removed; keep them with --dir DIR.\n")
	} else {
		p.f("\nThe demo's files are in %s; `ctxproxy report --ledger file:%s` prints the report again.\n", root, ledgerPath)
	}
	p.f("\nNext: run `ctxproxy --upstream https://api.anthropic.com --policies ./policies` and point your agent's base URL at it.\n")
	return p.err
}

// demoLoadPrices is the prices file the demo's ctxproxy lays over the
// built-in table: --prices, else policies/prices.yaml in the working folder
// when there is one; "" for the built-in table alone. from describes it.
func demoLoadPrices(path string) (file, from string, err error) {
	required := path != ""
	if path == "" {
		path = filepath.Join("policies", policy.PricesFile)
	}
	tab, err := tokens.OpenPrices(path, required)
	if err != nil {
		return "", "", fmt.Errorf("load prices: %w", err)
	}
	if _, err := os.Stat(path); err == nil {
		file = path
	}
	return file, tab.Describe(path), nil
}

// demoLedger reads the calls of the ledger a closed stack wrote.
func demoLedger(ctx context.Context, path string) ([]tokens.Call, error) {
	ledger, err := tokens.OpenLedger(ctx, "file:"+path)
	if err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	defer ledger.Close()
	calls, err := ledger.Query(ctx, tokens.Filter{})
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	return calls, nil
}

// ---- the scripted model ----

const (
	demoConv1Prompt = "I always want a window seat and vegetarian meals when I fly. Please remember that."
	demoConv2Prompt = "Book me a flight from Paris to Tokyo next Friday."
	demoConv3Prompt = "Our nightly batch job keeps failing. Find out why from the logs and open a ticket."
)

// demoStep is one model turn; marker names the tool call that shows the turn
// was taken (memory calls as "memory <command> <path>").
type demoStep struct {
	marker string
	reply  fakeapi.Reply
}

func demoSteps(conv int) []demoStep {
	blocks := func(b ...json.RawMessage) fakeapi.Reply { return fakeapi.Reply{Content: b} }
	if conv == 3 {
		return []demoStep{
			{"read_logs", blocks(fakeapi.Text("Reading last week's batch logs."), fakeapi.ToolUse("", "read_logs", map[string]string{"job": "nightly-batch"}))},
			{"grep_errors", blocks(fakeapi.Text("Lots of noise. Pulling out the errors."), fakeapi.ToolUse("", "grep_errors", map[string]string{"job": "nightly-batch"}))},
			{"open_ticket", blocks(fakeapi.Text("Every failure is the disk filling up at 03:00. Opening a ticket."),
				fakeapi.ToolUse("", "open_ticket", map[string]string{"title": "nightly-batch: rotate logs before 03:00, disk fills up"}))},
			{"", blocks(fakeapi.Text("Ticket OPS-4521 is open: the nightly batch fails when /var fills up at 03:00; rotating the logs daily fixes it."))},
		}
	}
	if conv != 2 {
		return []demoStep{
			{"memory view /memories", blocks(fakeapi.Text("Let me check what I already know about you."), fakeapi.MemoryView("/memories"))},
			{"memory create /memories/preferences.md", blocks(fakeapi.MemoryCreate("/memories/preferences.md",
				"# Travel preferences\n- seat: window\n- meals: vegetarian\n"))},
			{"", blocks(fakeapi.Text("Saved: a window seat and vegetarian meals on every flight. I will remember it next time."))},
		}
	}
	return []demoStep{
		{"memory view /memories/preferences.md", blocks(fakeapi.Text("Let me look at your saved preferences first."),
			fakeapi.MemoryView("/memories/preferences.md"))},
		{"search_flights", blocks(fakeapi.Text("You prefer a window seat and vegetarian meals. Searching flights."),
			fakeapi.ToolUse("", "search_flights", map[string]string{"from": "CDG", "to": "HND", "date": "next Friday"}))},
		{"seat_map", blocks(fakeapi.Text("AF276 fits best. Checking its window seats."),
			fakeapi.ToolUse("", "seat_map", map[string]string{"flight": "AF276"}))},
		{"meal_options", blocks(fakeapi.Text("23A is a free window seat. Checking the meals."),
			fakeapi.ToolUse("", "meal_options", map[string]string{"flight": "AF276"}))},
		{"book_flight", blocks(fakeapi.Text("Booking AF276, seat 23A, vegetarian meal."),
			fakeapi.ToolUse("", "book_flight", map[string]string{"flight": "AF276", "seat": "23A", "meal": "VGML"}))},
		{"", blocks(fakeapi.Text("Booked: AF276 Paris CDG to Tokyo HND next Friday, window seat 23A, vegetarian meal, as you asked me to remember."))},
	}
}

// demoAgent answers as the model of the session would: it finds the latest
// step whose tool call is already in the conversation and takes the next one.
// (Conversation position alone would not do: ctxproxy runs memory rounds the
// client never sees, so the client's history is shorter than the upstream's.)
func demoAgent(r *fakeapi.Request) fakeapi.Reply {
	if len(r.Messages) == 0 {
		return fakeapi.Reply{}
	}
	first := gjson.GetBytes(r.Messages[0], "content")
	firstText := first.Str
	if first.IsArray() {
		firstText = first.Get("0.text").Str
	}
	conv := map[string]int{demoConv2Prompt: 2, demoConv3Prompt: 3}[firstText]
	steps := demoSteps(conv)
	seen := map[string]bool{}
	for _, m := range r.Messages {
		gjson.GetBytes(m, "content").ForEach(func(_, b gjson.Result) bool {
			if b.Get("type").Str == "tool_use" {
				name := b.Get("name").Str
				if name == "memory" {
					name = "memory " + b.Get("input.command").Str + " " + b.Get("input.path").Str
				}
				seen[name] = true
			}
			return true
		})
	}
	next := 0
	for i, s := range steps {
		if s.marker != "" && seen[s.marker] {
			next = i + 1
		}
	}
	if next >= len(steps) {
		next = len(steps) - 1
	}
	return steps[next].reply
}

// ---- the agent (a plain HTTP client of the Messages API) ----

var demoTools = json.RawMessage(`[
 {"name":"search_flights","description":"Search flights","input_schema":{"type":"object","properties":{"from":{"type":"string"},"to":{"type":"string"},"date":{"type":"string"}}}},
 {"name":"seat_map","description":"Free seats of a flight","input_schema":{"type":"object","properties":{"flight":{"type":"string"}}}},
 {"name":"meal_options","description":"Meals of a flight","input_schema":{"type":"object","properties":{"flight":{"type":"string"}}}},
 {"name":"book_flight","description":"Book a seat","input_schema":{"type":"object","properties":{"flight":{"type":"string"},"seat":{"type":"string"},"meal":{"type":"string"}}}},
 {"name":"read_logs","description":"A job's logs","input_schema":{"type":"object","properties":{"job":{"type":"string"}}}},
 {"name":"grep_errors","description":"A job's error lines","input_schema":{"type":"object","properties":{"job":{"type":"string"}}}},
 {"name":"open_ticket","description":"Open an ops ticket","input_schema":{"type":"object","properties":{"title":{"type":"string"}}}}
]`)

// demoToolResult is what the agent's own tools answer: long listings, the
// kind of tool output that fills an agent's context.
func demoToolResult(name string) string {
	var b strings.Builder
	switch name {
	case "search_flights":
		for i := 0; i < 40; i++ {
			fmt.Fprintf(&b, "AF%d CDG 10:%02d -> HND 06:%02d+1, 1 stop, economy from EUR %d, seats left %d\n", 270+i, i%60, (i*7)%60, 780+13*i, 3+i%9)
		}
	case "seat_map":
		for row := 10; row < 40; row++ {
			fmt.Fprintf(&b, "row %d: A %s | B taken | C taken || D free | E taken | F %s\n", row, map[bool]string{true: "free (window)", false: "taken (window)"}[row%3 == 2], map[bool]string{true: "free (window)", false: "taken (window)"}[row%4 == 0])
		}
	case "meal_options":
		for _, m := range []string{"AVML Asian vegetarian", "VGML vegan", "VLML lacto-ovo vegetarian", "KSML kosher", "MOML muslim", "GFML gluten free", "DBML diabetic", "LSML low salt", "CHML child", "BBML baby", "FPML fruit platter", "SFML seafood"} {
			fmt.Fprintf(&b, "%s: available on AF276, order at least 24 hours before departure; served on both legs.\n", m)
		}
	case "book_flight":
		b.WriteString("Booking confirmed: AF276, seat 23A (window), meal VGML. Record locator Q7XK2P.")
	case "read_logs": // about 40,000 tokens: a week of a chatty job
		for i := 0; i < 1600; i++ {
			fmt.Fprintf(&b, "2026-11-%02d 0%d:%02d:%02d nightly-batch worker-%d processed chunk %05d of 20000 (%d records, %d ms)\n", 20+i%7, i%4, i%60, (i*7)%60, i%8, i, 500+i%97, 40+i%300)
		}
	case "grep_errors": // about 15,000 tokens
		for i := 0; i < 500; i++ {
			fmt.Fprintf(&b, "2026-11-%02d 03:%02d:%02d nightly-batch worker-%d ERROR write /var/spool/batch/chunk-%05d: no space left on device\n", 20+i%7, i%60, (i*13)%60, i%8, i)
		}
	case "open_ticket":
		b.WriteString("Ticket OPS-4521 opened.")
	default:
		b.WriteString("unknown tool")
	}
	return b.String()
}

type demoEdit struct {
	step         int
	typ          string
	uses, tokens int64
}

type demoClient struct {
	base        string
	model       string // "" is demoModel
	fake        *fakeapi.API
	p           *demoPrinter
	step        int
	edits       []demoEdit
	compactions []demoCompaction
}

// demoCompaction is one compaction the API ran: what it read and wrote, and
// what the next request then cost to read.
type demoCompaction struct {
	step           int
	in, out, next  int64
	awaitingNextIn bool
}

// conversation runs one agent conversation to its end: it sends the user's
// prompt, answers the model's tool calls with its own tools and stops at a
// reply without any.
func (c *demoClient) conversation(ctx context.Context, title, prompt string) error {
	c.p.f("\n%s\n", title)
	c.p.f("  user: %s\n", prompt)
	msgs := []json.RawMessage{demoJSON(map[string]any{"role": "user", "content": prompt})}
	for turn := 0; turn < 10; turn++ {
		c.step++
		// The newest request's number: the largest, not the last recorded (ctxproxy's own
		// models read at start may be recorded after a later request, out of arrival order).
		seq := int64(0)
		for _, r := range c.fake.Requests() {
			seq = max(seq, r.Seq)
		}
		model := c.model
		if model == "" {
			model = demoModel
		}
		body := demoJSON(map[string]any{"model": model, "max_tokens": 1024, "tools": demoTools, "messages": msgs})
		reply, err := c.post(ctx, body)
		if err != nil {
			return err
		}
		// What happened upstream for this one client request.
		var ups []fakeapi.Request
		for _, r := range c.fake.Requests() {
			if r.Seq > seq && r.Path == "/v1/messages" {
				ups = append(ups, r)
			}
		}
		c.p.f("  step %d: the agent sends %s; ctxproxy makes %s\n", c.step, demoPlural(len(msgs), "message"), demoPlural(len(ups), "upstream call"))
		for _, r := range ups[min(1, len(ups)):] {
			// Each later call carries the results of the memory calls ctxproxy ran.
			last := gjson.ParseBytes(r.Messages[len(r.Messages)-1])
			prev := gjson.ParseBytes(r.Messages[len(r.Messages)-2])
			last.Get("content").ForEach(func(_, res gjson.Result) bool {
				if res.Get("type").Str != "tool_result" {
					return true
				}
				call := prev.Get(`content.#(id=="` + res.Get("tool_use_id").Str + `")`)
				c.p.f("    ctxproxy ran memory %s %s -> %s\n", call.Get("input.command").Str, call.Get("input.path").Str, demoFirstLine(res.Get("content").Str))
				return true
			})
		}
		if edits := gjson.GetBytes(reply, "context_management.applied_edits"); edits.IsArray() {
			edits.ForEach(func(_, e gjson.Result) bool {
				d := demoEdit{step: c.step, typ: e.Get("type").Str, uses: e.Get("cleared_tool_uses").Int(), tokens: e.Get("cleared_input_tokens").Int()}
				c.edits = append(c.edits, d)
				c.p.f("    context editing: %s cleared %d old tool uses (%s input tokens)\n", d.typ, d.uses, demoCommas(d.tokens))
				return true
			})
		}
		c.noteCompaction(reply)
		var calls []gjson.Result
		gjson.GetBytes(reply, "content").ForEach(func(_, b gjson.Result) bool {
			switch b.Get("type").Str {
			case "compaction":
				c.p.f("    compaction: the API replaced the history with a summary: %s\n", b.Get("content").Str)
			case "text":
				c.p.f("    assistant: %s\n", b.Get("text").Str)
			case "tool_use":
				c.p.f("    assistant calls %s %s\n", b.Get("name").Str, b.Get("input").Raw)
				calls = append(calls, b)
			}
			return true
		})
		c.p.f("    usage: %s input, %s output tokens\n", demoCommas(gjson.GetBytes(reply, "usage.input_tokens").Int()), demoCommas(gjson.GetBytes(reply, "usage.output_tokens").Int()))
		if len(calls) == 0 {
			return nil
		}
		// The agent runs its own tools and sends everything back.
		msgs = append(msgs, demoJSON(map[string]any{"role": "assistant", "content": json.RawMessage(gjson.GetBytes(reply, "content").Raw)}))
		var results []any
		for _, call := range calls {
			out := demoToolResult(call.Get("name").Str)
			results = append(results, map[string]any{"type": "tool_result", "tool_use_id": call.Get("id").Str, "content": out})
			c.p.f("    the agent runs %s: %s of output\n", call.Get("name").Str, demoPlural(strings.Count(strings.TrimSuffix(out, "\n"), "\n")+1, "line"))
		}
		msgs = append(msgs, demoJSON(map[string]any{"role": "user", "content": results}))
	}
	return errors.New("the conversation did not end within 10 turns")
}

// noteCompaction records a compaction the reply reports in usage.iterations,
// and the input of the request after the last one.
func (c *demoClient) noteCompaction(reply []byte) {
	if n := len(c.compactions); n > 0 && c.compactions[n-1].awaitingNextIn {
		c.compactions[n-1].next = gjson.GetBytes(reply, "usage.input_tokens").Int()
		c.compactions[n-1].awaitingNextIn = false
	}
	gjson.GetBytes(reply, "usage.iterations").ForEach(func(_, it gjson.Result) bool {
		if it.Get("type").Str == "compaction" {
			c.compactions = append(c.compactions, demoCompaction{step: c.step, in: it.Get("input_tokens").Int(),
				out: it.Get("output_tokens").Int(), awaitingNextIn: true})
		}
		return true
	})
}

func (c *demoClient) post(ctx context.Context, body []byte) ([]byte, error) {
	return c.postAs(ctx, demoKey, body)
}

// postAs is post with another tenant's key.
func (c *demoClient) postAs(ctx context.Context, key string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("X-Api-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s/v1/messages: %w", c.base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read reply: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("POST /v1/messages: %d %s", resp.StatusCode, b)
	}
	return b, nil
}

// ---- helpers ----

type demoPrinter struct {
	w   io.Writer
	err error
}

func (p *demoPrinter) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

type demoFile struct{ rel, text string }

func demoFiles(dir string) ([]demoFile, error) {
	var files []demoFile
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() && !strings.HasPrefix(d.Name(), ".") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, path)
			files = append(files, demoFile{rel: filepath.ToSlash(rel), text: string(b)})
		}
		return nil
	})
	sort.Slice(files, func(i, j int) bool { return files[i].rel < files[j].rel })
	return files, err
}

func demoJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only the demo's own literals are marshalled
	}
	return b
}

func demoPlural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func demoFirstLine(s string) string {
	line, rest, _ := strings.Cut(s, "\n")
	if n := strings.Count(rest, "\n") + 1; rest != "" {
		return fmt.Sprintf("%q (+%s)", line, demoPlural(n, "line"))
	}
	return fmt.Sprintf("%q", line)
}

func demoCommas(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
