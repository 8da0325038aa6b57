package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/pgurl"
	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/memapi"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/server"
)

const memoryUsage = `Usage: ctxproxy memory COMMAND --tenant T [--user U] [flags] [args]

--user U works on user U's own store (a tenant with memory.scopes per user);
purge --user U removes that user's store and history and nothing else.

Commands:
  ls [--prefix /dir/]                 the tenant's memories
  cat PATH|ID [--version VER]         a memory's content (or a version's)
  history [PATH|ID] [--request REQ] [--key KEYID] [--limit N]
                                      versions, newest first
  diff VER [--from VER]               line diff of a version against the one before it (or --from)
  restore PATH|ID --version VER       write a version's content back as a new version
  export [--history]                  the memories (and versions) as JSONL on stdout
  import FILE|-                       write the memories of an export
  purge --yes                         erase every memory and version of the tenant

Over a running ctxproxy's operator API with --url and --token (env CTXPROXY_URL,
CTXPROXY_TOKEN), or straight on the store with --memory-store,
--memory-dir and --policies (as serve takes them). A write (restore, import,
purge) to a file store a ctxproxy is serving is refused: write through it, or
give --direct.
`

// memoryCLI is one `ctxproxy memory` run: an operator API client.
type memoryCLI struct {
	ctx    context.Context
	client *http.Client
	base   string
	token  string
	store  string // memstore_<tenant>
	out    io.Writer
}

func runMemory(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	switch {
	case len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help"):
		fmt.Fprint(stdout, memoryUsage)
		return 0
	case len(args) == 0:
		fmt.Fprint(stderr, memoryUsage)
		return 2
	}
	cmd := args[0]
	if _, ok := memoryArgs[cmd]; !ok {
		fmt.Fprintf(stderr, "ctxproxy memory: unknown command %q (ls, cat, history, diff, restore, export, import, purge)\n\n", cmd)
		fmt.Fprint(stderr, memoryUsage)
		return 2
	}
	fs := flag.NewFlagSet("ctxproxy memory "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	tenant := fs.String("tenant", "", "the tenant, or default~KEYID for one key's store of the default tenant (required)")
	user := fs.String("user", "", "the store of this user of the tenant (memory.scopes store: user)")
	base := envString(fs, getenv, "url", "CTXPROXY_URL", "", "a running ctxproxy, e.g. http://127.0.0.1:8080 (env CTXPROXY_URL)")
	token := new(string)
	tokenFlag(fs, getenv, token)
	memStore := serveFlag("memory-store").define(fs, getenv, "without --url: file or a postgres:// URL")
	memDir := serveFlag("memory-dir").define(fs, getenv, "without --url: the file store's folder")
	pols := serveFlag("policies").define(fs, getenv, "without --url: the policies folder")
	audit := serveFlag("memory-audit").define(fs, getenv, "without --url: the audit log the calls are written to (unset: memory-audit.jsonl in the data folder, the parent of --memory-dir)")
	o := memoryOpts{
		prefix:  fs.String("prefix", "", "ls: only paths under this /dir/"),
		version: fs.String("version", "", "cat, restore: the version id"),
		from:    fs.String("from", "", "diff: the older version (default: the one before)"),
		request: fs.String("request", "", "history: only versions of this upstream request id"),
		key:     fs.String("key", "", "history: only versions of this key id (8 hex)"),
		limit:   fs.Int("limit", 50, "history: at most this many"),
		history: fs.Bool("history", false, "export: the versions too"),
		yes:     fs.Bool("yes", false, "purge: yes, erase it all"),
		direct:  fs.Bool("direct", false, "without --url: write the file store even while a ctxproxy serves it (its history and operator API will not see the write)"),
	}
	// Flags may come after the arguments too (cat /a.md --version V).
	var pos []string
	for rest := args[1:]; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if rest = fs.Args(); len(rest) == 0 {
			break
		}
		pos, rest = append(pos, rest[0]), rest[1:]
	}
	if *tenant == "" {
		fmt.Fprintln(stderr, "ctxproxy memory "+cmd+": --tenant is required")
		return 2
	}
	if msg := memoryUsageError(cmd, pos, o); msg != "" {
		fmt.Fprintln(stderr, "ctxproxy memory "+cmd+": "+msg)
		return 2
	}
	store := *tenant
	if *user != "" {
		store = policy.UserStore(*tenant, *user)
	}
	c := &memoryCLI{ctx: ctx, client: http.DefaultClient, base: strings.TrimSuffix(*base, "/"), token: *token,
		store: memapi.StoreIDPrefix + store, out: stdout}
	if c.base == "" && memoryWrites[cmd] && !pgurl.Is(*memStore) {
		unlock, err := lockStore(storeLockPath(*memDir), true)
		switch {
		case errors.Is(err, errStoreBusy) && !*o.direct:
			fmt.Fprintf(stderr, "ctxproxy memory %s: a ctxproxy is serving the file store %s: write through it (--url, --token), or stop it, or give --direct to write under it\n", cmd, *memDir)
			return 1
		case errors.Is(err, errStoreBusy):
			fmt.Fprintf(stderr, "ctxproxy memory %s: warning: writing the file store %s while a ctxproxy serves it (--direct)\n", cmd, *memDir)
		case err != nil:
			fmt.Fprintln(stderr, "ctxproxy memory:", err)
			return 1
		default:
			defer unlock()
		}
	}
	if c.base == "" {
		stop, err := c.local(ctx, &config{MemoryStore: *memStore, MemoryDir: *memDir, MemoryAudit: *audit}, *pols)
		if err != nil {
			fmt.Fprintln(stderr, "ctxproxy memory:", err)
			return 1
		}
		defer stop()
	}
	if err := c.run(cmd, pos, o); err != nil {
		fmt.Fprintln(stderr, "ctxproxy memory "+cmd+":", err)
		return 1
	}
	return 0
}

// memoryArgs are the memory commands and the arguments each takes: the one place that says
// what a usage error of theirs is (memoryUsageError), checked before any work.
var memoryArgs = map[string]struct {
	min, max int
	missing  string // what to say when the argument is not there
}{
	"ls":      {0, 0, ""},
	"cat":     {1, 1, "name a memory: its path (/notes/a.md) or id (mem_…)"},
	"history": {0, 1, ""},
	"diff":    {1, 1, "name a version (memver_…)"},
	"restore": {1, 1, "name a memory: its path (/notes/a.md) or id (mem_…)"},
	"export":  {0, 0, ""},
	"import":  {1, 1, "name the export file (or - for stdin)"},
	"purge":   {0, 0, ""},
}

// memoryUsageError is what is wrong with a memory command's arguments and flags, "" when
// nothing is.
func memoryUsageError(cmd string, pos []string, o memoryOpts) string {
	a := memoryArgs[cmd]
	switch {
	case len(pos) > a.max:
		return fmt.Sprintf("unexpected argument %q", pos[a.max])
	case a.min > 0 && (len(pos) < a.min || pos[0] == ""):
		return a.missing
	case cmd == "restore" && *o.version == "":
		return "--version is required"
	case cmd == "purge" && !*o.yes:
		return "purge erases every memory and version of the tenant for good; add --yes"
	}
	return ""
}

type memoryOpts struct {
	prefix, version, from, request, key *string
	limit                               *int
	history, yes, direct                *bool
}

// local serves the operator API in process over the store itself.
func (c *memoryCLI) local(ctx context.Context, cfg *config, policies string) (func(), error) {
	pols, err := policy.NewStore(policies, zap.NewNop())
	if err != nil {
		return nil, fmt.Errorf("load policies: %w", err)
	}
	mem, closeMem, err := server.OpenMemoryStore(ctx, cfg.MemoryStore, cfg.MemoryDir, zap.NewNop())
	if err != nil {
		return nil, err
	}
	st, ok := mem.(memoryhook.Governed)
	if !ok {
		closeMem()
		return nil, errors.New("this memory store keeps no history")
	}
	audit, err := memapi.OpenAudit(server.MemoryAuditPath(cfg.MemoryAudit, cfg.MemoryDir))
	if err != nil {
		closeMem()
		return nil, err
	}
	var tok [16]byte
	rand.Read(tok[:])
	c.token = "local-" + hex.EncodeToString(tok[:])
	api := memapi.New(memapi.Config{Store: st, Policies: pols, AdminToken: c.token, Audit: audit, Log: zap.NewNop()})
	c.base = "http://ctxproxy.local"
	c.client = &http.Client{Transport: handlerTransport{api}}
	return func() { audit.Close(); closeMem() }, nil
}

// handlerTransport answers requests with an http.Handler, in process.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

func (c *memoryCLI) run(cmd string, args []string, o memoryOpts) error {
	arg := ""
	if len(args) > 0 {
		arg = args[0]
	}
	switch cmd {
	case "ls":
		return c.ls(*o.prefix)
	case "cat":
		return c.cat(arg, *o.version)
	case "history":
		return c.history(arg, *o.request, *o.key, *o.limit)
	case "diff":
		return c.diff(arg, *o.from)
	case "restore":
		return c.restore(arg, *o.version)
	case "export":
		return c.export(*o.history)
	case "import":
		return c.importFile(arg)
	case "purge":
		return c.purge()
	}
	panic("memoryArgs names a command run does not: " + cmd)
}

// call sends one API request; it returns the body of a 2xx answer, else
// the API's error message.
func (c *memoryCLI) call(method, path string, q url.Values, body io.Reader) ([]byte, error) {
	u := c.base + "/v1/memory_stores/" + c.store + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(c.ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("x-api-key", c.token)
	req.Header.Set("content-type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		if msg := gjson.GetBytes(b, "error.message").Str; msg != "" {
			return nil, fmt.Errorf("%s (%s)", msg, gjson.GetBytes(b, "error.type").Str)
		}
		return nil, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

func jsonBody(v any) io.Reader {
	b, _ := json.Marshal(v)
	return bytes.NewReader(b)
}

// memories lists every memory (all pages).
func (c *memoryCLI) memories(prefix string) ([]gjson.Result, error) {
	var out []gjson.Result
	q := url.Values{"limit": {"100"}}
	if prefix != "" {
		q.Set("path_prefix", prefix)
	}
	for {
		b, err := c.call(http.MethodGet, "/memories", q, nil)
		if err != nil {
			return nil, err
		}
		page := gjson.ParseBytes(b)
		out = append(out, page.Get("data").Array()...)
		next := page.Get("next_page")
		if next.Type == gjson.Null || next.Str == "" {
			return out, nil
		}
		q.Set("page", next.Str)
	}
}

// memoryID resolves a path (starting with /) or an id to the memory's id.
func (c *memoryCLI) memoryID(arg string) (string, error) {
	if !strings.HasPrefix(arg, "/") {
		return arg, nil
	}
	ms, err := c.memories("")
	if err != nil {
		return "", err
	}
	for _, m := range ms {
		if m.Get("path").Str == arg {
			return m.Get("id").Str, nil
		}
	}
	return "", fmt.Errorf("no memory at %s", arg)
}

func (c *memoryCLI) ls(prefix string) error {
	ms, err := c.memories(prefix)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tSIZE\tUPDATED\tID\tVERSION")
	for _, m := range ms {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", m.Get("path").Str, m.Get("content_size_bytes").Int(),
			shortTime(m.Get("updated_at").Str), m.Get("id").Str, m.Get("memory_version_id").Str)
	}
	return tw.Flush()
}

// shortTime is an API time as every table of the CLIs shows times (tableTime).
func shortTime(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return tableTime(t)
}

// tableTime is how every table of ctxproxy's commands shows a time: RFC 3339
// in UTC, to the second (keys ls, memory ls and history, the report's caps).
func tableTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func (c *memoryCLI) cat(arg, version string) error {
	if version != "" {
		b, err := c.call(http.MethodGet, "/memory_versions/"+url.PathEscape(version), nil, nil)
		if err != nil {
			return err
		}
		v := gjson.GetBytes(b, "content")
		if v.Type == gjson.Null {
			return fmt.Errorf("version %s has no content (a deletion, or redacted)", version)
		}
		_, err = io.WriteString(c.out, v.Str)
		return err
	}
	id, err := c.memoryID(arg)
	if err != nil {
		return err
	}
	b, err := c.call(http.MethodGet, "/memories/"+url.PathEscape(id), nil, nil)
	if err != nil {
		return err
	}
	_, err = io.WriteString(c.out, gjson.GetBytes(b, "content").Str)
	return err
}

func (c *memoryCLI) history(arg, request, key string, limit int) error {
	q := url.Values{"limit": {fmt.Sprint(min(max(limit, 1), 100))}}
	if arg != "" {
		id, err := c.memoryID(arg)
		if err != nil {
			return err
		}
		q.Set("memory_id", id)
	}
	if request != "" {
		q.Set("request_id", request)
	}
	if key != "" {
		q.Set("api_key_id", key)
	}
	b, err := c.call(http.MethodGet, "/memory_versions", q, nil)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tOP\tPATH\tSIZE\tBY\tREQUEST\tVERSION\tMEMORY")
	for _, v := range gjson.GetBytes(b, "data").Array() {
		path := v.Get("path").Str
		if v.Get("redacted_at").Type != gjson.Null {
			path = "(redacted)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", shortTime(v.Get("created_at").Str), v.Get("operation").Str, path,
			v.Get("content_size_bytes").Int(), actorName(v.Get("created_by")), dash(v.Get("created_by.request_id").Str),
			v.Get("id").Str, v.Get("memory_id").Str)
	}
	return tw.Flush()
}

// actorName is who wrote, in a word: key:<id>, op:<name> or system.
func actorName(a gjson.Result) string {
	switch a.Get("type").Str {
	case memoryhook.ActorModel:
		return "key:" + a.Get("api_key_id").Str
	case memoryhook.ActorOperator:
		return "op:" + a.Get("service_account_id").Str
	}
	return "system"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (c *memoryCLI) diff(ver, from string) error {
	q := url.Values{}
	if from != "" {
		q.Set("from", from)
	}
	b, err := c.call(http.MethodGet, "/memory_versions/"+url.PathEscape(ver)+"/diff", q, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "--- %s\n+++ %s\n", dash(gjson.GetBytes(b, "from").Str), gjson.GetBytes(b, "to").Str)
	_, err = io.WriteString(c.out, gjson.GetBytes(b, "diff").Str)
	return err
}

func (c *memoryCLI) restore(arg, version string) error {
	id, err := c.memoryID(arg)
	if err != nil {
		return err
	}
	b, err := c.call(http.MethodPost, "/memories/"+url.PathEscape(id)+"/restore", nil, jsonBody(map[string]string{"version_id": version}))
	if err != nil {
		return err
	}
	m := gjson.ParseBytes(b)
	fmt.Fprintf(c.out, "restored %s (%s) to the content of %s: new version %s, sha256 %s\n",
		m.Get("path").Str, m.Get("id").Str, version, m.Get("memory_version_id").Str, m.Get("content_sha256").Str)
	return nil
}

func (c *memoryCLI) export(history bool) error {
	q := url.Values{}
	if history {
		q.Set("history", "true")
	}
	b, err := c.call(http.MethodGet, "/export", q, nil)
	if err != nil {
		return err
	}
	_, err = c.out.Write(b)
	return err
}

func (c *memoryCLI) importFile(name string) error {
	var r io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	b, err := c.call(http.MethodPost, "/import", nil, r)
	if err != nil {
		return err
	}
	g := gjson.ParseBytes(b)
	fmt.Fprintf(c.out, "imported into %s: %d created, %d updated, %d unchanged, %d version lines skipped\n", c.store,
		g.Get("created").Int(), g.Get("updated").Int(), g.Get("unchanged").Int(), g.Get("skipped_versions").Int())
	return nil
}

func (c *memoryCLI) purge() error {
	b, err := c.call(http.MethodPost, "/purge", nil, jsonBody(map[string]string{"confirm": c.store}))
	if err != nil {
		return err
	}
	g := gjson.ParseBytes(b)
	fmt.Fprintf(c.out, "purged %s: %d files and %d versions removed\n", c.store, g.Get("files").Int(), g.Get("versions").Int())
	return nil
}
