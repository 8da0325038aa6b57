package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ctxproxy/ctxproxy/admin"
	"github.com/ctxproxy/ctxproxy/server"
)

const keysUsage = `Usage: ctxproxy keys create|ls|revoke|rotate --tenant T [flags] [ID]

  create --tenant T --name N [--user U] [--expires 2027-01-31T00:00:00Z|720h]
  ls     --tenant T
  revoke --tenant T ID
  rotate --tenant T [--grace 24h] ID

Talks to a running ctxproxy's /admin/keys (--url, env CTXPROXY_URL) with the
admin token (--token, env CTXPROXY_TOKEN).
`

// keysCmd is one `ctxproxy keys` invocation.
type keysCmd struct {
	base, token, tenant string
	name, user, expires string
	grace               string
	asJSON              bool
	id                  string
	client              *http.Client
}

// runKeys mints, lists, revokes and rotates ctxproxy keys over the operator
// API of a running ctxproxy, printing a table (or JSON with --json).
func runKeys(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	switch {
	case len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help"):
		fmt.Fprint(stdout, keysUsage)
		return 0
	case len(args) == 0:
		fmt.Fprint(stderr, keysUsage)
		return 2
	case strings.HasPrefix(args[0], "-"):
		fmt.Fprintf(stderr, "ctxproxy keys: name a command before the flags (create, ls, revoke, rotate), not %q\n\n", args[0])
		fmt.Fprint(stderr, keysUsage)
		return 2
	}
	verb := args[0]
	c, err := parseKeysFlags(verb, args[1:], stderr, getenv)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "ctxproxy keys "+verb+":", err)
		return 2
	}
	var out any
	switch verb {
	case "create":
		out, err = c.create(ctx)
	case "ls", "list":
		out, err = c.list(ctx)
	case "revoke":
		out, err = c.call(ctx, http.MethodPost, "/admin/keys/"+url.PathEscape(c.id)+"/revoke", nil)
	case "rotate":
		out, err = c.call(ctx, http.MethodPost, "/admin/keys/"+url.PathEscape(c.id)+"/rotate", admin.RotateRequest{Grace: c.grace})
	}
	if err != nil {
		fmt.Fprintln(stderr, "ctxproxy keys "+verb+":", err)
		return 1
	}
	if c.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(out) //nolint:errcheck // stdout
		return 0
	}
	printKeys(stdout, out)
	return 0
}

func parseKeysFlags(verb string, args []string, stderr io.Writer, getenv func(string) string) (*keysCmd, error) {
	switch verb {
	case "create", "ls", "list", "revoke", "rotate":
	default:
		fmt.Fprint(stderr, keysUsage)
		return nil, fmt.Errorf("unknown command %q", verb)
	}
	c := &keysCmd{client: &http.Client{Timeout: 30 * time.Second}}
	fs := flag.NewFlagSet("ctxproxy keys "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	local := "http://" + server.DefaultListen // serve's own default address
	fs.StringVar(&c.base, "url", envOr(getenv, "CTXPROXY_URL", local), "ctxproxy's base URL (env CTXPROXY_URL)")
	fs.Lookup("url").DefValue = local // -h never shows the environment's
	fs.StringVar(&c.token, "admin-token", "", "the former name of --token")
	tokenFlag(fs, getenv, &c.token)
	fs.StringVar(&c.tenant, "tenant", "", "the tenant (required)")
	fs.BoolVar(&c.asJSON, "json", false, "print JSON")
	if verb == "create" {
		fs.StringVar(&c.name, "name", "", "what the key is for, e.g. ci or a laptop (required)")
		fs.StringVar(&c.user, "user", "", "who holds it; reports group by it")
		fs.StringVar(&c.expires, "expires", "", "when it stops working: an RFC 3339 time or a duration from now (720h)")
	}
	if verb == "rotate" {
		fs.StringVar(&c.grace, "grace", "", "how long the old key keeps working (default 0: revoked at once)")
	}
	// Flags may come before or after the key id.
	var rest []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) > 0 {
			rest, args = append(rest, args[0]), args[1:]
		}
	}
	needID := verb == "revoke" || verb == "rotate"
	switch {
	case c.tenant == "":
		return nil, errors.New("--tenant is required")
	case verb == "create" && c.name == "":
		return nil, errors.New("--name is required")
	case needID && len(rest) != 1:
		return nil, errors.New("give the key's id (see ctxproxy keys ls)")
	case !needID && len(rest) > 0:
		return nil, fmt.Errorf("unexpected argument %q", rest[0])
	case c.token == "":
		return nil, errors.New("--token (or CTXPROXY_TOKEN) is required: the admin token")
	}
	if needID {
		c.id = rest[0]
	}
	return c, nil
}

func (c *keysCmd) create(ctx context.Context) (any, error) {
	req := admin.CreateRequest{Tenant: c.tenant, Name: c.name, User: c.user}
	if c.expires != "" {
		if d, err := time.ParseDuration(c.expires); err == nil {
			req.ExpiresAt = time.Now().Add(d).UTC().Format(time.RFC3339)
		} else {
			req.ExpiresAt = c.expires
		}
	}
	return c.call(ctx, http.MethodPost, "/admin/keys", req)
}

func (c *keysCmd) list(ctx context.Context) (any, error) {
	var out admin.KeyList
	err := c.do(ctx, http.MethodGet, "/admin/keys?tenant="+url.QueryEscape(c.tenant), nil, &out)
	return out, err
}

// call does a request that answers one key.
func (c *keysCmd) call(ctx context.Context, method, path string, body any) (any, error) {
	if method == http.MethodPost && path != "/admin/keys" {
		path += "?tenant=" + url.QueryEscape(c.tenant)
	}
	var out admin.KeyJSON
	err := c.do(ctx, method, path, body, &out)
	return out, err
}

func (c *keysCmd) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.base, "/")+path, rd)
	if err != nil {
		return fmt.Errorf("--url: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("read reply: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error struct{ Type, Message string }
		}
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			return fmt.Errorf("%d %s: %s", resp.StatusCode, e.Error.Type, e.Error.Message)
		}
		return fmt.Errorf("%s answered %d", c.base, resp.StatusCode)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("read reply: %w", err)
	}
	return nil
}

// printKeys writes keys as a table; a key shown once gets a line of its own.
func printKeys(w io.Writer, out any) {
	var list []admin.KeyJSON
	switch v := out.(type) {
	case admin.KeyList:
		list = v.Data
	case admin.KeyJSON:
		list = []admin.KeyJSON{v}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKEY_ID\tTENANT\tNAME\tUSER\tCREATED\tEXPIRES\tLAST_USED\tREVOKED")
	ts := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return tableTime(*t)
	}
	for _, k := range list {
		user := k.User
		if user == "" {
			user = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.KeyID, k.Tenant, k.Name, user,
			ts(&k.CreatedAt), ts(k.ExpiresAt), ts(k.LastUsedAt), ts(k.RevokedAt))
	}
	tw.Flush()
	if len(list) == 1 && list[0].Key != "" {
		fmt.Fprintf(w, "\nKEY (shown once, keep it now): %s\n", list[0].Key)
	}
}
