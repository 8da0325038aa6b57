package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/internal/pgtest"
	"github.com/ctxproxy/ctxproxy/memoryhook/pgstore"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// runBinary runs the built binary with args and env (over a clean
// environment) and returns its exit code, stdout and stderr.
func runBinary(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

func TestBinaryMigrate(t *testing.T) {
	t.Run("applies the memory store's and the ledger's schemas, named by the server's env twins", func(t *testing.T) {
		db := pgtest.New(t, "migrate_test")
		env := []string{"CTXPROXY_MEMORY_STORE=" + db.URL, "CTXPROXY_LEDGER=" + db.URL}
		code, out, errs := runBinary(t, env, "migrate")
		if code != 0 {
			t.Fatalf("exit %d\n%s%s", code, out, errs)
		}
		for _, want := range []string{
			"--memory-store postgres@127.0.0.1:5432/test: schema memory at version " + itoa(pgstore.Schema.Version()) + " (was 0)",
			"--ledger postgres@127.0.0.1:5432/test: schema ledger at version " + itoa(tokens.PGSchema.Version()) + " (was 0)",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		db.Exec(t, `INSERT INTO ctxproxy_memory_usage (tenant) VALUES ('acme')`)
		db.Exec(t, `INSERT INTO ctxproxy_ledger (time, tenant, model) VALUES (now(), 'acme', 'm')`)

		code, out, errs = runBinary(t, nil, "migrate", "--memory-store", db.URL, "--ledger", db.URL)
		if code != 0 || !strings.Contains(out, "schema memory at version "+itoa(pgstore.Schema.Version())+" (was "+itoa(pgstore.Schema.Version())+")") {
			t.Fatalf("second run (flags): exit %d\n%s%s", code, out, errs)
		}
		if n := db.QueryInt(t, `SELECT count(*) FROM ctxproxy_ledger`); n != 1 {
			t.Errorf("the second run lost data: %d ledger rows", n)
		}
	})
	t.Run("an unset --limits-store is migrated where the server keeps it: the ledger's database", func(t *testing.T) {
		db := pgtest.New(t, "migrate_test")
		code, out, errs := runBinary(t, []string{"CTXPROXY_LEDGER=" + db.URL}, "migrate")
		if code != 0 || !strings.Contains(out, "--limits-store postgres@127.0.0.1:5432/test: schema ") {
			t.Fatalf("exit %d\n%s%s", code, out, errs)
		}
		code, out, errs = runBinary(t, []string{"CTXPROXY_LEDGER=file:" + t.TempDir() + "/ledger.jsonl"}, "migrate")
		if code != 0 || strings.Contains(out, "schema ") || !strings.Contains(out, "nothing to migrate") {
			t.Fatalf("a file ledger keeps its limits in memory, nothing to migrate: exit %d\n%s%s", code, out, errs)
		}
	})
	t.Run("a database newer than the binary fails with the cause", func(t *testing.T) {
		db := pgtest.New(t, "migrate_test")
		if code, out, errs := runBinary(t, nil, "migrate", "--ledger", db.URL); code != 0 {
			t.Fatalf("exit %d\n%s%s", code, out, errs)
		}
		db.Exec(t, `INSERT INTO ctxproxy_ledger_migrations (version) VALUES (1000)`)
		code, _, errs := runBinary(t, nil, "migrate", "--ledger", db.URL)
		if code != 1 || !strings.Contains(errs, "ctxproxy migrate: --ledger postgres@127.0.0.1:5432/test: migrate schema ledger: database schema version 1000 is newer than this build's") {
			t.Fatalf("exit %d\n%s", code, errs)
		}
	})
	t.Run("an unreachable database fails without showing the password", func(t *testing.T) {
		code, _, errs := runBinary(t, nil, "migrate", "--memory-store", "postgres://ctxproxy:s3cret-pw@127.0.0.1:1/ctxproxy")
		if code != 1 || !strings.Contains(errs, "--memory-store ctxproxy@127.0.0.1:1/ctxproxy:") {
			t.Fatalf("exit %d\n%s", code, errs)
		}
		if strings.Contains(errs, "s3cret-pw") {
			t.Errorf("the password is in the output:\n%s", errs)
		}
	})
	t.Run("file stores need nothing and say so", func(t *testing.T) {
		code, out, errs := runBinary(t, nil, "migrate")
		if code != 0 || !strings.Contains(out, "nothing to migrate") {
			t.Fatalf("exit %d\n%s%s", code, out, errs)
		}
	})
	t.Run("a stray argument is refused", func(t *testing.T) {
		if code, _, errs := runBinary(t, nil, "migrate", "now"); code != 2 || !strings.Contains(errs, `unexpected argument "now"`) {
			t.Fatalf("exit %d\n%s", code, errs)
		}
	})
	t.Run("ctxproxy --help lists it", func(t *testing.T) {
		code, out, errs := runBinary(t, nil, "--help")
		if code != 0 || !strings.Contains(out+errs, "\n  migrate ") {
			t.Fatalf("exit %d\n%s%s", code, out, errs)
		}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }
