package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ctxproxy/ctxproxy/tokens"
)

// The reports row (-reports SPEC): the month's reports on a ledger ledgergen filled,
// through the CLI, a served ctxproxy's /admin/report and its console's Tenants page, each
// timed once warm (after one untimed run: the ledger's pages are in the OS cache, as on a
// server) with the peak memory it took above its process's baseline.

const reportsToken = "bench-reports-admin-token"

// reportCell is one measured report.
type reportCell struct {
	what     string
	wall     time.Duration
	cpu      time.Duration // the CLI's own; a server's is not split from its other work
	peakKiB  int64         // peak RSS above the baseline
	baseline string
	err      error
}

func (r *runner) reportsRun() (string, error) {
	spec, month := r.c.reports, r.c.reportsMonth
	start, err := time.Parse("2006-01", month)
	if err != nil {
		return "", fmt.Errorf("-reports-month %q: want YYYY-MM", month)
	}
	since, until := start.Format(time.DateOnly), start.AddDate(0, 1, -1).Format(time.DateOnly)
	empty, dropEmpty, err := emptyLedger(r.work, spec)
	if err != nil {
		return "", err
	}
	defer dropEmpty()
	var cells []reportCell
	for _, tenant := range []string{"", "tenant-042"} {
		args := []string{"report", "--since", since, "--until", until}
		what := "`ctxproxy report` all tenants, " + month
		if tenant != "" {
			args = append(args, "--tenant", tenant)
			what = "`ctxproxy report --tenant " + tenant + "`, " + month
		}
		base, err := r.cliReport(empty, args)
		if err != nil {
			return "", fmt.Errorf("empty ledger: %w", err)
		}
		r.cliReport(spec, args) //nolint:errcheck // warm-up; the timed run reports its error
		c, err := r.cliReport(spec, args)
		c.what, c.err = what, err
		c.wall -= base.wall
		c.cpu -= base.cpu
		c.peakKiB -= base.peakKiB
		c.baseline = fmt.Sprintf("over the empty ledger's %s, %.1f MiB", base.wall.Round(time.Millisecond), float64(base.peakKiB)/1024)
		cells = append(cells, c)
	}
	served, err := r.servedReports(spec, since, until, month)
	if err != nil {
		return "", err
	}
	cells = append(cells, served...)
	var b strings.Builder
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&b, "## Reports on %s (%s)\n\n%s- load average at the end: %s\n", redactURL(spec), month, machine(), strings.TrimSpace(string(load)))
	b.WriteString("| report | time | CPU | peak memory above baseline | baseline |\n|---|---|---|---|---|\n")
	for _, c := range cells {
		if c.err != nil {
			fmt.Fprintf(&b, "| %s | failed: %v | | | |\n", c.what, c.err)
			continue
		}
		cpu := "—"
		if c.cpu > 0 {
			cpu = c.cpu.Round(time.Millisecond).String()
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.1f MiB | %s |\n", c.what, c.wall.Round(time.Millisecond), cpu, float64(c.peakKiB)/1024, c.baseline)
	}
	return b.String(), nil
}

// cliReport runs `ctxproxy report` on ledger from an empty folder (no ./policies).
func (r *runner) cliReport(ledger string, args []string) (reportCell, error) {
	cmd := exec.Command(r.bin, append(args, "--ledger", ledger)...)
	cmd.Dir = r.work
	cmd.Env = withoutCtxproxyEnv(os.Environ())
	cmd.Stdout = io.Discard
	var stderr strings.Builder
	cmd.Stderr = &stderr
	began := time.Now()
	err := cmd.Run()
	c := reportCell{wall: time.Since(began)}
	if err != nil {
		return c, fmt.Errorf("%w: %s", err, stderr.String())
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		c.peakKiB = ru.Maxrss
		c.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	return c, nil
}

// servedReports starts ctxproxy on the ledger and times its /admin/report and console Tenants
// page; the peak is VmHWM, reset just before each request, over the RSS just before it.
func (r *runner) servedReports(spec, since, until, month string) ([]reportCell, error) {
	srv, err := startCtxproxy(r.work, "reports-ctxproxy", r.bin, []string{"CTXPROXY_ADMIN_TOKEN=" + reportsToken},
		"--policies", r.polDir, "--memory-dir", filepath.Join(r.work, "reports-memories"), "--ledger", spec, "--log-level", "warn")
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Timeout: 5 * time.Minute}
	var out []reportCell
	get := func(what, path string, admin bool) {
		do := func() error {
			req, _ := http.NewRequest(http.MethodGet, srv.url()+path, nil)
			if admin {
				req.Header.Set("Authorization", "Bearer "+reportsToken)
			}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			io.Copy(io.Discard, resp.Body) //nolint:errcheck // timed to the last byte
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", path, resp.Status)
			}
			return nil
		}
		do() //nolint:errcheck // warm-up; the timed run reports its error
		before := srv.rss()
		os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", srv.pid), []byte("5"), 0) //nolint:errcheck // VmHWM := VmRSS
		began := time.Now()
		err := do()
		c := reportCell{what: what, wall: time.Since(began), err: err}
		c.peakKiB = (srv.hwm() - before) >> 10
		c.baseline = fmt.Sprintf("the server's RSS before the request, %.1f MiB", float64(before)/(1<<20))
		out = append(out, c)
	}
	q := url.Values{"since": {since}, "until": {until}}
	get("`/admin/report` all tenants, "+month, "/admin/report?"+q.Encode(), true)
	get("`/admin/report` all tenants since "+since+" (the Tenants page's query)", "/admin/report?since="+since, true)
	q.Set("tenant", "tenant-042")
	get("`/admin/report?tenant=tenant-042`, "+month, "/admin/report?"+q.Encode(), true)
	if err := consoleSignIn(client, srv.url()); err != nil {
		out = append(out, reportCell{what: "console Tenants page", err: err})
		return out, nil
	}
	get("console Tenants page (this month: "+time.Now().UTC().Format("2006-01")+")", "/admin/ui/", false)
	return out, nil
}

var csrfField = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// consoleSignIn signs client in to the console with the admin token, as its form does.
func consoleSignIn(client *http.Client, base string) error {
	resp, err := client.Get(base + "/admin/ui/login")
	if err != nil {
		return err
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := csrfField.FindSubmatch(page)
	if m == nil {
		return fmt.Errorf("console sign-in form: no csrf_token (%s)", resp.Status)
	}
	resp, err = client.PostForm(base+"/admin/ui/login", url.Values{"csrf_token": {string(m[1])}, "token": {reportsToken}})
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck // the redirect was followed
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("console sign-in: %s", resp.Status)
	}
	return nil
}

// emptyLedger is a ledger of the same kind as spec with no lines: a file, or a schema of its
// own in spec's database (dropped by the returned func). It is made as a serving ctxproxy makes
// it (tokens.OpenLedger), since a report never creates a ledger.
func emptyLedger(work, spec string) (string, func(), error) {
	if strings.HasPrefix(spec, "file:") {
		empty := "file:" + filepath.Join(work, "empty.jsonl")
		if err := createLedger(empty); err != nil {
			return "", nil, err
		}
		return empty, func() {}, nil
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, spec)
	if err != nil {
		return "", nil, fmt.Errorf("empty ledger: %w", err)
	}
	schema := fmt.Sprintf("bench_reports_empty_%d", os.Getpid())
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		conn.Close(ctx)
		return "", nil, fmt.Errorf("empty ledger: %w", err)
	}
	sep := "?"
	if strings.Contains(spec, "?") {
		sep = "&"
	}
	empty := spec + sep + "search_path=" + schema
	if err := createLedger(empty); err != nil {
		conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE") //nolint:errcheck // best effort
		conn.Close(ctx)
		return "", nil, err
	}
	return empty, func() {
		conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE") //nolint:errcheck // best effort
		conn.Close(ctx)
	}, nil
}

// createLedger makes the ledger spec names, with no lines.
func createLedger(spec string) error {
	l, err := tokens.OpenLedger(context.Background(), spec)
	if err != nil {
		return fmt.Errorf("empty ledger: %w", err)
	}
	return l.Close()
}

// redactURL leaves a URL's password out.
func redactURL(spec string) string {
	if u, err := url.Parse(spec); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "***")
			return u.String()
		}
	}
	return spec
}
