package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/internal/pgtest"
)

// runCLI runs the built ctxproxy with args and only the environment env
// (nothing of the test's own), and returns its exit code, stdout and stderr.
func runCLI(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	cmd.Dir = t.TempDir() // no ./policies or ./data of the checkout
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return code, o.String(), e.String()
}

func TestBinaryCommandLine(t *testing.T) {
	// A server that started would hold the port: listening on a free one
	// proves nothing, so the command is given one no server could bind.
	noServe := []string{"CTXPROXY_LISTEN=256.0.0.1:1"}
	t.Run("an unknown command prints the usage and exits 2, serving nothing", func(t *testing.T) {
		for _, cmd := range []string{"halp", "reprot"} {
			code, stdout, stderr := runCLI(t, noServe, cmd)
			if code != 2 || !strings.Contains(stderr, `unknown command "`+cmd+`"`) || !strings.Contains(stderr, "Usage: ctxproxy") || stdout != "" {
				t.Errorf("ctxproxy %s: exit %d\nstdout %s\nstderr %s", cmd, code, stdout, stderr)
			}
			if strings.Contains(stderr, "listen") && strings.Contains(stderr, "256.0.0.1") {
				t.Errorf("ctxproxy %s tried to serve: %s", cmd, stderr)
			}
		}
	})
	t.Run("help prints the usage and exits 0", func(t *testing.T) {
		code, stdout, _ := runCLI(t, noServe, "help")
		if code != 0 || !strings.Contains(stdout, "Usage: ctxproxy") || !strings.Contains(stdout, "-listen") {
			t.Errorf("ctxproxy help: exit %d\n%s", code, stdout)
		}
	})
	t.Run("-h never prints a secret from the environment as a default", func(t *testing.T) {
		env := []string{"CTXPROXY_ADMIN_TOKEN=sekrit-admin", "CTXPROXY_TOKEN=sekrit-token", "CTXPROXY_OPERATOR_TOKEN=sekrit-op",
			"CTXPROXY_MEMORY_STORE=postgres://u:sekrit-pw@db/x", "CTXPROXY_LEDGER=postgres://u:sekrit-pw@db/x", "CTXPROXY_URL=http://u:sekrit-pw@h"}
		for _, args := range [][]string{{"-h"}, {"serve", "-h"}, {"keys", "ls", "-h"}, {"memory", "ls", "-h"}, {"report", "-h"}, {"migrate", "-h"}, {"validate", "-h"}} {
			_, stdout, stderr := runCLI(t, env, args...)
			if out := stdout + stderr; strings.Contains(out, "sekrit") || !strings.Contains(out, "-") {
				t.Errorf("ctxproxy %v shows a secret:\n%s", args, out)
			}
		}
	})
	t.Run("keys and memory take the token as --token or CTXPROXY_TOKEN", func(t *testing.T) {
		for _, args := range [][]string{{"keys", "ls", "-h"}, {"memory", "ls", "-h"}} {
			_, _, stderr := runCLI(t, nil, args...)
			if !strings.Contains(stderr, "-token") || !strings.Contains(stderr, "CTXPROXY_TOKEN") {
				t.Errorf("ctxproxy %v:\n%s", args, stderr)
			}
		}
	})
}

func TestBinaryValidateDir(t *testing.T) {
	good, bad := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(good, "acme.yaml"), []byte("tenant: acme\n"), 0o644)
	os.WriteFile(filepath.Join(bad, "acme.yaml"), []byte("tenant: acme\nmemroy: {}\n"), 0o644)
	t.Run("validate DIR validates DIR", func(t *testing.T) {
		if code, stdout, stderr := runCLI(t, nil, "validate", good); code != 0 || !strings.Contains(stdout, "acme") {
			t.Errorf("good: exit %d\n%s%s", code, stdout, stderr)
		}
		if code, stdout, _ := runCLI(t, nil, "validate", bad); code != 1 || !strings.Contains(stdout, "acme.yaml:2") {
			t.Errorf("bad: exit %d\n%s", code, stdout)
		}
	})
	t.Run("two folders are a usage error", func(t *testing.T) {
		if code, _, _ := runCLI(t, nil, "validate", good, bad); code != 2 {
			t.Errorf("exit %d, want 2", code)
		}
	})
}

func TestBinaryReportRefuses(t *testing.T) {
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger.jsonl")
	t.Run("refuses a ledger that does not exist, and creates none", func(t *testing.T) {
		code, _, stderr := runCLI(t, nil, "report", "--ledger", "file:"+ledger)
		if code != 1 || !strings.Contains(stderr, "no ledger at "+ledger) {
			t.Errorf("exit %d: %s", code, stderr)
		}
		if _, err := os.Stat(ledger); !os.IsNotExist(err) {
			t.Errorf("the report created %s: %v", ledger, err)
		}
	})
	t.Run("refuses a PostgreSQL database that holds no ledger, and writes no schema there", func(t *testing.T) {
		db := pgtest.New(t, "report_no_ledger")
		code, stdout, stderr := runCLI(t, nil, "report", "--ledger", db.URL)
		if code != 1 || !strings.Contains(stderr, "no ledger in postgres postgres@127.0.0.1/test: its tables are not there") {
			t.Errorf("exit %d: %s%s", code, stdout, stderr)
		}
		if n := db.QueryInt(t, `SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()`); n != 0 {
			t.Errorf("the report created %d tables", n)
		}
	})
	if err := os.WriteFile(ledger, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pols := t.TempDir()
	os.WriteFile(filepath.Join(pols, "acme.yaml"), []byte("tenant: acme\nupstream:\n  api_key_env: ACME_ANTHROPIC_KEY\nlimits:\n  spend: [{period: daily, usd: 10}]\n"), 0o644)
	t.Run("works without the tenants' upstream secrets, and says when a tenant has no rows", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, nil, "report", "--ledger", "file:"+ledger, "--policies", pols, "--tenant", "acme")
		if code != 0 || !strings.Contains(stderr, `tenant "acme" has no ledger lines`) || strings.Contains(stderr, "ACME_ANTHROPIC_KEY") {
			t.Errorf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
		}
	})
	t.Run("usage errors exit 2", func(t *testing.T) {
		for _, args := range [][]string{{"--group-by", "week"}, {"--no-such-flag"}, {"--since", "tomorrow"}} {
			if code, _, stderr := runCLI(t, nil, append([]string{"report", "--ledger", "file:" + ledger}, args...)...); code != 2 {
				t.Errorf("report %v: exit %d: %s", args, code, stderr)
			}
		}
	})
}

// advise reads a ledger as report does: a missing one is an error, never one it creates.
func TestBinaryAdviseRefuses(t *testing.T) {
	t.Run("refuses a ledger that does not exist, and creates none", func(t *testing.T) {
		ledger := filepath.Join(t.TempDir(), "ledger.jsonl")
		code, _, stderr := runCLI(t, nil, "advise", "--tenant", "acme", "--ledger", "file:"+ledger)
		if code != 1 || !strings.Contains(stderr, "no ledger at "+ledger) {
			t.Errorf("exit %d: %s", code, stderr)
		}
		if _, err := os.Stat(ledger); !os.IsNotExist(err) {
			t.Errorf("advise created %s: %v", ledger, err)
		}
	})
	t.Run("refuses a PostgreSQL database that holds no ledger, and writes no schema there", func(t *testing.T) {
		db := pgtest.New(t, "advise_no_ledger")
		code, stdout, stderr := runCLI(t, nil, "advise", "--tenant", "acme", "--ledger", db.URL)
		if code != 1 || !strings.Contains(stderr, "no ledger in postgres postgres@127.0.0.1/test: its tables are not there") {
			t.Errorf("exit %d: %s%s", code, stdout, stderr)
		}
		if n := db.QueryInt(t, `SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()`); n != 0 {
			t.Errorf("advise created %d tables", n)
		}
	})
}

// `ctxproxy memory` without --url does not write a file store a proxy is
// serving, unless told --direct; reads go on.
func TestBinaryMemoryRefusesToWriteAServedStore(t *testing.T) {
	_, upURL := fakeUpstream(t)
	mem := t.TempDir()
	pols := binPolicies(t)
	p := startProxy(t, "--upstream", upURL, "--policies", pols, "--memory-dir", mem,
		"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"))
	local := []string{"--tenant", "acme", "--memory-dir", mem, "--policies", pols, "--memory-audit", filepath.Join(t.TempDir(), "a.jsonl")}
	code, _, stderr := runCLI(t, nil, append([]string{"memory", "purge", "--yes"}, local...)...)
	if code != 1 || !strings.Contains(stderr, "a ctxproxy is serving the file store") || !strings.Contains(stderr, "--direct") {
		t.Errorf("purge under a proxy: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, append([]string{"memory", "ls"}, local...)...); code != 0 {
		t.Errorf("ls under a proxy: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, append([]string{"memory", "purge", "--yes", "--direct"}, local...)...); code != 0 || !strings.Contains(stderr, "warning") {
		t.Errorf("purge --direct: exit %d: %s", code, stderr)
	}
	p.Stop()
	if code, _, stderr := runCLI(t, nil, append([]string{"memory", "purge", "--yes"}, local...)...); code != 0 {
		t.Errorf("purge with no proxy serving: exit %d: %s", code, stderr)
	}
}

// TestBinaryUsageErrorsExit2 holds every subcommand to one rule: a usage error (a flag it
// does not know, an argument missing or too many) exits 2 with a message that says what is
// wrong, before any work; -h is no error.
func TestBinaryUsageErrorsExit2(t *testing.T) {
	noServe := []string{"CTXPROXY_LISTEN=256.0.0.1:1"} // a server that started could not listen
	tests := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"serve with an unknown flag", []string{"serve", "--bogus"}, "flag provided but not defined: -bogus"},
		{"serving by default with an unknown flag", []string{"--bogus"}, "flag provided but not defined: -bogus"},
		{"serve with a bad value", []string{"--max-body", "lots"}, "--max-body"},
		{"migrate with an unknown flag", []string{"migrate", "--bogus"}, "flag provided but not defined: -bogus"},
		{"migrate with an argument", []string{"migrate", "now"}, `unexpected argument "now"`},
		{"validate with an unknown flag", []string{"validate", "--bogus"}, "flag provided but not defined: -bogus"},
		{"validate with two folders", []string{"validate", "a", "b"}, "one folder at most"},
		{"report with an unknown flag", []string{"report", "--bogus"}, "flag provided but not defined: -bogus"},
		{"report with an argument", []string{"report", "ledger.jsonl"}, `unexpected argument "ledger.jsonl"`},
		{"report with a bad --group-by", []string{"report", "--group-by", "colour"}, "--group-by"},
		{"report with a bad --since", []string{"report", "--since", "yesterday"}, "yesterday"},
		{"advise with an unknown flag", []string{"advise", "--bogus"}, "flag provided but not defined: -bogus"},
		{"advise without --tenant", []string{"advise"}, "--tenant is required"},
		{"keys without a command", []string{"keys"}, "Usage: ctxproxy keys"},
		{"keys with a flag for a command", []string{"keys", "--tenant", "acme"}, "name a command before the flags"},
		{"keys with an unknown command", []string{"keys", "delete", "--tenant", "acme"}, `unknown command "delete"`},
		{"keys with an unknown flag", []string{"keys", "ls", "--bogus"}, "flag provided but not defined: -bogus"},
		{"keys ls without --tenant", []string{"keys", "ls"}, "--tenant is required"},
		{"keys create without --name", []string{"keys", "create", "--tenant", "acme"}, "--name is required"},
		{"keys revoke without the key's id", []string{"keys", "revoke", "--tenant", "acme"}, "give the key's id"},
		{"memory without a command", []string{"memory"}, "Usage: ctxproxy memory"},
		{"memory with an unknown command", []string{"memory", "rm", "--tenant", "acme"}, `unknown command "rm"`},
		{"memory with an unknown flag", []string{"memory", "ls", "--bogus"}, "flag provided but not defined: -bogus"},
		{"memory ls without --tenant", []string{"memory", "ls"}, "--tenant is required"},
		{"memory ls with an argument", []string{"memory", "ls", "/notes", "--tenant", "acme"}, `unexpected argument "/notes"`},
		{"memory cat without a memory", []string{"memory", "cat", "--tenant", "acme"}, "name a memory"},
		{"memory diff without a version", []string{"memory", "diff", "--tenant", "acme"}, "name a version"},
		{"memory restore without --version", []string{"memory", "restore", "/a.md", "--tenant", "acme"}, "--version is required"},
		{"memory import without a file", []string{"memory", "import", "--tenant", "acme"}, "name the export file"},
		{"memory purge without --yes", []string{"memory", "purge", "--tenant", "acme"}, "add --yes"},
		{"demo with an unknown flag", []string{"demo", "--bogus"}, "flag provided but not defined: -bogus"},
		{"demo with an argument", []string{"demo", "now"}, `unexpected argument "now"`},
		{"version with an argument", []string{"version", "--short"}, `unexpected argument "--short"`},
		{"help with an argument", []string{"help", "memory"}, `unexpected argument "memory"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, noServe, tt.args...)
			if code != 2 || !strings.Contains(stderr, tt.want) {
				t.Errorf("ctxproxy %s: exit %d, want 2 with %q\nstdout %s\nstderr %s", strings.Join(tt.args, " "), code, tt.want, stdout, stderr)
			}
		})
	}
	for _, args := range [][]string{{"keys", "-h"}, {"memory", "--help"}, {"memory", "ls", "-h"}, {"report", "-h"}, {"demo", "-h"}} {
		t.Run(strings.Join(args, " ")+" is no error", func(t *testing.T) {
			if code, stdout, stderr := runCLI(t, noServe, args...); code != 0 || !strings.Contains(stdout+stderr, "sage") {
				t.Errorf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}
		})
	}
}
