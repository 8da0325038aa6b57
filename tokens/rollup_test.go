package tokens

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ctxproxy/ctxproxy/internal/pgmigrate"
	"github.com/ctxproxy/ctxproxy/internal/pgtest"
)

// rollupStart is the start of the random ledgers' month; their lines spread over it and a
// day either side.
var rollupStart = time.Date(2026, 2, 28, 0, 0, 0, 0, time.UTC)

// reportFilters are the periods and tenants the reports are compared on: open, a month,
// whole hours and days, bounds inside an hour or a day, both bounds in one hour.
func reportFilters() []Filter {
	mar := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	odd := mar.Add(50*time.Hour + 17*time.Minute + 3*time.Second + 5*time.Microsecond)
	var out []Filter
	for _, tenant := range []string{"", "tenant-3"} {
		out = append(out,
			Filter{Tenant: tenant},
			Filter{Tenant: tenant, Since: mar, Until: mar.AddDate(0, 1, 0)},
			Filter{Tenant: tenant, Since: mar},
			Filter{Tenant: tenant, Until: mar.Add(7 * time.Hour)},
			Filter{Tenant: tenant, Since: odd, Until: odd.Add(9*24*time.Hour + 31*time.Minute)},
			Filter{Tenant: tenant, Since: odd, Until: odd.Add(20 * time.Minute)},
			Filter{Tenant: tenant, Since: odd.Add(-time.Hour).Truncate(time.Hour), Until: odd},
			Filter{Tenant: tenant, Since: odd.In(time.FixedZone("IST", 5*3600+1800))},
		)
	}
	return out
}

// checkReportsEqualScan checks every report of l, read from its rollups, against the same
// report summed line by line from a full scan.
func checkReportsEqualScan(t *testing.T, l Ledger) {
	t.Helper()
	ctx := context.Background()
	all, err := l.Query(ctx, Filter{}) // the full scan, filtered below as Query filters
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range reportFilters() {
		var calls []Call
		for i := range all {
			if f.Match(&all[i]) {
				calls = append(calls, all[i])
			}
		}
		for _, g := range []string{GroupByModel, GroupByDay, GroupByKey, GroupByUser} {
			got, err := RunReport(ctx, l, f, g)
			if err != nil {
				t.Fatal(err)
			}
			if msg := reportDiff(got, BuildReport(calls, g)); msg != "" {
				t.Fatalf("%s report of %+v: %s", g, f, msg)
			}
		}
	}
}

// reportDiff compares the sums of two reports ("" when equal).
func reportDiff(got, want Report) string {
	got.Tenant, got.Since, got.Until = "", nil, nil
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(want)
	if string(a) != string(b) {
		return fmt.Sprintf("\n got %s\nwant %s", a, b)
	}
	return ""
}

// rollupSuite checks a store's rollups against full scans.
func rollupSuite(t *testing.T, open func(t *testing.T) BatchLedger) {
	ctx := context.Background()
	t.Run("reports from rollups equal full scans of random ledgers", func(t *testing.T) {
		for seed := range uint64(2) {
			l := open(t)
			calls := randomCalls(rand.New(rand.NewPCG(seed, 7)), 500, rollupStart, 24*33)
			for i := 0; i < len(calls); {
				n := min(1+int(seed*13+uint64(i))%50, len(calls)-i)
				if _, err := l.AppendBatch(ctx, calls[i:i+n]); err != nil {
					t.Fatal(err)
				}
				i += n
			}
			checkReportsEqualScan(t, l)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("a report run while lines are written sums whole batches it saw", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		calls := randomCalls(rand.New(rand.NewPCG(9, 9)), 400, rollupStart, 24*33)
		const batch = 10
		// want[n] is the report of the first n batches.
		var want []Report
		for n := 0; n*batch <= len(calls); n++ {
			want = append(want, BuildReport(calls[:n*batch], GroupByModel))
		}
		var wg sync.WaitGroup
		wg.Add(1)
		errc := make(chan error, 1)
		go func() {
			defer wg.Done()
			for i := 0; i < len(calls); i += batch {
				if _, err := l.AppendBatch(ctx, calls[i:i+batch]); err != nil {
					errc <- err
					return
				}
			}
		}()
		for range 20 {
			got, err := RunReport(ctx, l, Filter{}, GroupByModel)
			if err != nil {
				t.Fatal(err)
			}
			n := int(got.Total.Calls) // narrow the candidates down by the calls counted
			found := false
			for i := range want {
				if want[i].Total.Calls == int64(n) && reportDiff(got, want[i]) == "" {
					found = true
					break
				}
			}
			if !found {
				t.Fatalf("a report of %d calls is the report of no prefix of the batches", n)
			}
		}
		wg.Wait()
		select {
		case err := <-errc:
			t.Fatal(err)
		default:
		}
		checkReportsEqualScan(t, l)
	})
}

// foldEvery makes l fold when its batches since the last fold hold lines lines, and never
// for the time passed (0: never fold).
// freshPGLedger is a PostgreSQL ledger in a schema of its own, closed with the test.
func freshPGLedger(t *testing.T) (*pgtest.DB, *PGLedger) {
	t.Helper()
	db := pgtest.New(t, "tokens_test")
	l, err := OpenPGLedger(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return db, l
}

// pendingRows is how many pending rollup rows db holds.
func pendingRows(t *testing.T, db *pgtest.DB) int64 {
	t.Helper()
	return db.QueryInt(t, `SELECT count(*) FROM `+db.Schema+`.ctxproxy_ledger_rollup_pending`)
}

func foldEvery(l *PGLedger, lines int) *PGLedger {
	if lines == 0 {
		lines = math.MaxInt
	}
	l.fold.everyLines, l.fold.after, l.fold.last = lines, time.Duration(math.MaxInt64), time.Now()
	return l
}

func TestPGRollups(t *testing.T) {
	ctx := context.Background()
	for _, every := range []int{1, 37, 0} {
		t.Run(fmt.Sprintf("folding every %d lines", every), func(t *testing.T) {
			rollupSuite(t, func(t *testing.T) BatchLedger {
				l, err := OpenPGLedger(ctx, pgTestURL(t))
				if err != nil {
					t.Fatal(err)
				}
				return foldEvery(l, every)
			})
		})
	}
	t.Run("a batch whose fold fails keeps its lines, their sums pending", func(t *testing.T) {
		db, l := freshPGLedger(t)
		foldEvery(l, 1)
		db.Exec(t, `ALTER TABLE `+db.Schema+`.ctxproxy_ledger_rollup ADD CONSTRAINT doomed CHECK (tenant <> 'doomed')`)
		calls := randomCalls(rand.New(rand.NewPCG(4, 4)), 50, rollupStart, 48)
		if _, err := l.AppendBatch(ctx, calls[:20]); err != nil {
			t.Fatal(err)
		}
		bad := append([]Call(nil), calls[20:30]...)
		bad[7].Tenant = "doomed"
		if n, err := l.AppendBatch(ctx, bad); err == nil || n != len(bad) {
			t.Fatalf("AppendBatch = %d, %v; want every line stored and the fold's failure", n, err)
		}
		// Every later fold takes the doomed sums and fails; the lines are kept all the same.
		if n, err := l.AppendBatch(ctx, calls[30:]); n != 20 || err == nil {
			t.Fatalf("AppendBatch = %d, %v; want every line stored and the fold's failure", n, err)
		}
		if n := db.QueryInt(t, `SELECT count(*) FROM `+db.Schema+`.ctxproxy_ledger`); n != 50 {
			t.Fatalf("%d lines, want all 50", n)
		}
		checkReportsEqualScan(t, l)
	})
	t.Run("a fold that fails leaves its batch's sums pending with the others, and loses none", func(t *testing.T) {
		db, l := freshPGLedger(t)
		foldEvery(l, 0)
		db.Exec(t, `ALTER TABLE `+db.Schema+`.ctxproxy_ledger_rollup_day ADD CONSTRAINT doomed CHECK (tenant <> 'doomed')`)
		calls := randomCalls(rand.New(rand.NewPCG(6, 6)), 60, rollupStart, 48)
		calls[13].Tenant = "doomed"
		if _, err := l.AppendBatch(ctx, calls[:20]); err != nil { // pending: not folded yet
			t.Fatal(err)
		}
		foldEvery(l, 1)
		if n, err := l.AppendBatch(ctx, calls[20:40]); err == nil || n != 20 {
			t.Fatalf("AppendBatch = %d, %v; want every line stored and the fold's failure", n, err)
		}
		if n := db.QueryInt(t, `SELECT count(*) FROM `+db.Schema+`.ctxproxy_ledger`); n != 40 {
			t.Fatalf("%d lines, want the 40 of both batches", n)
		}
		if n := pendingRows(t, db); n != 2 {
			t.Fatalf("%d pending rows, want both batches'", n)
		}
		checkReportsEqualScan(t, l)
		db.Exec(t, `ALTER TABLE `+db.Schema+`.ctxproxy_ledger_rollup_day DROP CONSTRAINT doomed`)
		if _, err := l.AppendBatch(ctx, calls[40:]); err != nil {
			t.Fatal(err)
		}
		if n := pendingRows(t, db); n != 0 {
			t.Fatalf("%d pending rows after a fold, want 0", n)
		}
		checkReportsEqualScan(t, l)
	})
	t.Run("a process killed before it folds leaves its sums pending, and the next one folds them", func(t *testing.T) {
		db := pgtest.New(t, "tokens_test")
		calls := randomCalls(rand.New(rand.NewPCG(7, 7)), 300, rollupStart, 24*33)
		killed, err := OpenPGLedger(ctx, db.URL)
		if err != nil {
			t.Fatal(err)
		}
		foldEvery(killed, 0)
		for i := 0; i < 200; i += 25 {
			if _, err := killed.AppendBatch(ctx, calls[i:i+25]); err != nil {
				t.Fatal(err)
			}
		}
		killed.pool.Close() // its connections end as a killed process's do
		l, err := OpenPGLedger(ctx, db.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if n := pendingRows(t, db); n != 8 {
			t.Fatalf("%d pending rows, want the killed process's 8 batches", n)
		}
		checkReportsEqualScan(t, l)
		if _, err := l.AppendBatch(ctx, calls[200:]); err != nil { // a process's first batch folds
			t.Fatal(err)
		}
		if n := pendingRows(t, db); n != 0 {
			t.Fatalf("%d pending rows after the next process's first batch, want 0", n)
		}
		checkReportsEqualScan(t, l)
	})
	t.Run("a fold takes every batch written since the last one: one-line batches do not pile up", func(t *testing.T) {
		db, l := freshPGLedger(t)
		foldEvery(l, 7)
		calls := randomCalls(rand.New(rand.NewPCG(10, 10)), 60, rollupStart, 24)
		for i := range calls {
			if _, err := l.AppendBatch(ctx, calls[i:i+1]); err != nil {
				t.Fatal(err)
			}
		}
		if n := pendingRows(t, db); n >= 7 {
			t.Fatalf("%d pending rows after 60 one-line batches folding every 7 lines, want fewer than 7", n)
		}
		checkReportsEqualScan(t, l)
	})
	t.Run("a fold leaves a newer build's pending rows, of sums it does not keep, for that build", func(t *testing.T) {
		db, l := freshPGLedger(t)
		foldEvery(l, 1)
		newer := []byte{pendingFormat, byte(len(rollupSums) + 1), 0}
		db.Exec(t, `INSERT INTO `+db.Schema+`.ctxproxy_ledger_rollup_pending (batch) VALUES ($1)`, newer)
		calls := randomCalls(rand.New(rand.NewPCG(11, 11)), 10, rollupStart, 24)
		if _, err := l.AppendBatch(ctx, calls); err != nil {
			t.Fatalf("a fold failed on a newer build's row: %v", err)
		}
		if n := pendingRows(t, db); n != 1 {
			t.Fatalf("%d pending rows, want the newer build's one left", n)
		}
	})
	t.Run("processes folding at once sum every batch once", func(t *testing.T) {
		db := pgtest.New(t, "tokens_test")
		calls := randomCalls(rand.New(rand.NewPCG(8, 8)), 600, rollupStart, 24*3)
		var wg sync.WaitGroup
		errc := make(chan error, 3)
		for p := range 3 {
			l, err := OpenPGLedger(ctx, db.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			foldEvery(l, 1+p*7)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := p * 10; i < len(calls); i += 30 {
					if _, err := l.AppendBatch(ctx, calls[i:i+10]); err != nil {
						errc <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatal(err)
		}
		l, err := OpenPGLedger(ctx, db.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		checkReportsEqualScan(t, l)
		if n := db.QueryInt(t, `SELECT count(*) FROM `+db.Schema+`.ctxproxy_ledger`); n != 600 {
			t.Fatalf("%d lines, want 600", n)
		}
	})
	t.Run("a database migrated to rollups sums the lines it had", func(t *testing.T) {
		db := pgtest.New(t, "tokens_test")
		pool, err := pgxpool.New(ctx, db.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		old := pgmigrate.Schema{Name: PGSchema.Name, Versions: PGSchema.Versions[:8]}
		if _, err := pgmigrate.Apply(ctx, pool, old); err != nil {
			t.Fatal(err)
		}
		calls := randomCalls(rand.New(rand.NewPCG(5, 5)), 500, rollupStart, 24*33)
		// Unknown edits as they came (their counts read from the raw JSON), one not an object.
		calls[3].Edits = []AppliedEdit{{Type: "clear_x_1", ClearedToolUses: 4, ClearedThinkingTurns: 2, ClearedInputTokens: 70,
			Raw: `{"type":"clear_x_1","cleared_tool_uses":4,"cleared_thinking_turns":2.0,"cleared_input_tokens":70}`}}
		calls[4].Edits = []AppliedEdit{{Type: "clear_y_1", ClearedInputTokens: 5, Raw: `{"type":"clear_y_1","cleared_tool_uses":"many","cleared_input_tokens":5}`}}
		// The columns of schema 8: the later ones are not there yet.
		columns := strings.Replace(pgColumns, ", "+pgColumnsV12, "", 1)
		for i := 0; i < len(calls); i += 50 {
			var b strings.Builder
			b.WriteString(columns)
			var args []any
			for j := range calls[i : i+50] {
				if j > 0 {
					b.WriteByte(',')
				}
				row := pgValuesRow(len(args))
				// pgValuesRow numbers pgNumColumns placeholders: keep those of schema 8's.
				b.WriteString(row[:strings.LastIndex(row, fmt.Sprintf(",$%d", len(args)+pgNumColumns-pgNumColumnsV12+1))] + ")")
				args = appendPGArgs(args, &calls[i+j])
				args = args[:len(args)-pgNumColumnsV12]
			}
			if _, err := pool.Exec(ctx, b.String(), args...); err != nil {
				t.Fatal(err)
			}
		}
		l, err := OpenPGLedger(ctx, db.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		checkReportsEqualScan(t, l)
		for _, tb := range pgRollupTables {
			if n := db.QueryInt(t, `SELECT count(*) FROM `+db.Schema+`.`+tb.table); n == 0 {
				t.Fatalf("no rows in %s: the reports were read from elsewhere", tb.table)
			}
		}
	})
	t.Run("every sum has its column", func(t *testing.T) {
		db, _ := freshPGLedger(t) // opening it makes the tables
		for _, tb := range pgRollupTables {
			for _, f := range rollupSums {
				if n := db.QueryInt(t, `SELECT count(*) FROM information_schema.columns WHERE table_schema = $1
					AND table_name = $2 AND column_name = $3`, db.Schema, tb.table, f.col); n != 1 {
					t.Errorf("%s has no column %s", tb.table, f.col)
				}
			}
		}
	})
}

// A sum added to Totals and not to rollupSums would read 0 from every rollup.
func TestRollupSumsEveryTotal(t *testing.T) {
	var tot Totals
	kept := map[uintptr]bool{}
	for _, f := range rollupSums {
		kept[uintptr(unsafe.Pointer(f.of(&tot)))] = true
	}
	v := reflect.ValueOf(&tot).Elem()
	for i := range v.NumField() {
		if v.Field(i).Kind() != reflect.Int64 {
			continue // CacheHitRate: derived from the sums
		}
		if !kept[v.Field(i).Addr().Pointer()] {
			t.Errorf("Totals.%s is not in rollupSums", v.Type().Field(i).Name)
		}
	}
}

func TestFileRollups(t *testing.T) {
	rollupSuite(t, func(t *testing.T) BatchLedger {
		l, err := OpenFileLedger(filepath.Join(t.TempDir(), "ledger.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
	ctx := context.Background()
	appendAll := func(t *testing.T, l BatchLedger, calls []Call) {
		t.Helper()
		for i := 0; i < len(calls); i += 25 {
			if _, err := l.AppendBatch(ctx, calls[i:min(i+25, len(calls))]); err != nil {
				t.Fatal(err)
			}
		}
	}
	open := func(t *testing.T, path string) *FileLedger {
		t.Helper()
		l, err := OpenFileLedger(path)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	calls := randomCalls(rand.New(rand.NewPCG(11, 3)), 600, rollupStart, 24*33)
	t.Run("a process killed after its writes, before its rollup was saved", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "ledger.jsonl")
		l := open(t, path)
		appendAll(t, l, calls[:300])
		if err := l.Close(); err != nil { // saves the rollup of the first 300
			t.Fatal(err)
		}
		if _, err := os.Stat(path + ".rollup"); err != nil {
			t.Fatal(err)
		}
		killed := open(t, path)
		appendAll(t, killed, calls[300:600]) // never closed: its rollup dies with it
		l = open(t, path)
		defer l.Close()
		checkReportsEqualScan(t, l)
		if got, _ := RunReport(ctx, l, Filter{}, GroupByModel); got.Total.Calls == 0 {
			t.Fatal("no calls")
		}
		killed.f.Close()
		killed.rf.Close()
	})
	t.Run("lines another process appended, and a partial last line, are read from the file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "ledger.jsonl")
		l := open(t, path)
		defer l.Close()
		appendAll(t, l, calls[:200])
		checkReportsEqualScan(t, l) // the rollup is loaded and up to date
		other := open(t, path)
		appendAll(t, other, calls[200:400])
		other.Close()
		appendAll(t, l, calls[400:500]) // after the other's lines: the rollup is behind
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		line := AppendCall(nil, &calls[500])
		f.Write(line[:len(line)/2]) // a line being written
		f.Close()
		checkReportsEqualScan(t, l)
	})
	t.Run("a rollup file of another ledger, a truncated ledger or a corrupt rollup file is rebuilt", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "ledger.jsonl")
		l := open(t, path)
		appendAll(t, l, calls[:250])
		l.Close()
		other := filepath.Join(dir, "other.jsonl")
		lo := open(t, other)
		appendAll(t, lo, calls[250:600])
		lo.Close()
		for name, damage := range map[string]func(){
			"another ledger's rollup": func() { copyFile(t, other+".rollup", path+".rollup") },
			"a corrupt rollup":        func() { os.WriteFile(path+".rollup", []byte("not gob"), 0o600) },
			"the ledger cut short": func() {
				b, _ := os.ReadFile(path)
				os.WriteFile(path, b[:bytes.LastIndexByte(b[:len(b)/2], '\n')+1], 0o600)
			},
			"the ledger replaced by a longer one": func() { copyFile(t, other, path) },
		} {
			t.Run(name, func(t *testing.T) {
				damage()
				l := open(t, path)
				defer l.Close()
				checkReportsEqualScan(t, l)
			})
		}
	})
	t.Run("lines find their rows after the rollup is rebuilt and after its cache of rows starts over", func(t *testing.T) {
		defer func(n int) { fileRollupLinesMax = n }(fileRollupLinesMax)
		fileRollupLinesMax = 7 // far fewer than the lines' days, tenants, models, keys and users
		path := filepath.Join(t.TempDir(), "ledger.jsonl")
		l := open(t, path)
		defer l.Close()
		appendAll(t, l, calls[:200])
		checkReportsEqualScan(t, l)
		if n := len(l.rollup.byLine); n == 0 || n > fileRollupLinesMax {
			t.Fatalf("%d lines' rows cached, want 1 to %d", n, fileRollupLinesMax)
		}
		other := open(t, path)
		appendAll(t, other, calls[200:300]) // the next report rebuilds the rollup: new rows
		other.Close()
		checkReportsEqualScan(t, l)
		appendAll(t, l, calls[300:600]) // into the rebuilt rows, not the cached old ones
		checkReportsEqualScan(t, l)
	})
	t.Run("a catch-up cancelled part way counts none of its lines twice", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "ledger.jsonl")
		l := open(t, path)
		many := randomCalls(rand.New(rand.NewPCG(5, 5)), 5000, rollupStart, 24*33) // past scanLines' 4,096 between two looks at ctx
		appendAll(t, l, many)
		l.Close()
		os.Remove(path + ".rollup")
		l = open(t, path)
		defer l.Close()
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		l.rollup.mu.Lock()
		_, err = l.rollup.catchUp(&errAfter{Context: ctx, n: 1}, l.rf, st.Size())
		l.rollup.mu.Unlock()
		if err == nil {
			t.Fatal("catch-up not cancelled")
		}
		got, err := RunReport(ctx, l, Filter{}, GroupByModel)
		if err != nil {
			t.Fatal(err)
		}
		if msg := reportDiff(got, BuildReport(many, GroupByModel)); msg != "" {
			t.Fatal(msg)
		}
	})
	t.Run("the rollup file is only a cache: removing it loses nothing", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "ledger.jsonl")
		l := open(t, path)
		appendAll(t, l, calls)
		l.Close()
		before, _ := os.ReadFile(path + ".rollup")
		os.Remove(path + ".rollup")
		l = open(t, path)
		defer l.Close()
		checkReportsEqualScan(t, l)
		if after, err := os.ReadFile(path + ".rollup"); err != nil || len(after) != len(before) {
			t.Errorf("the rebuilt rollup file has %d bytes (%v), the one written as lines came %d", len(after), err, len(before))
		}
	})
}

// errAfter is a context whose Err is nil n times, then context.Canceled.
type errAfter struct {
	context.Context
	n int
}

func (c *errAfter) Err() error {
	if c.n--; c.n < 0 {
		return context.Canceled
	}
	return nil
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestAddTotalsAddsEverySum(t *testing.T) {
	var one, sum Totals
	for i, f := range rollupSums {
		*f.of(&one) = int64(i + 1)
	}
	sum.addTotals(&one)
	sum.addTotals(&one)
	for i, f := range rollupSums {
		if got := *f.of(&sum); got != 2*int64(i+1) {
			t.Errorf("%s: %d, want %d", f.col, got, 2*(i+1))
		}
	}
}

func TestPendingRollupRows(t *testing.T) {
	calls := randomCalls(rand.New(rand.NewPCG(3, 1)), 300, rollupStart, 24*3)
	calls[5].Time = time.Date(1969, 12, 31, 23, 59, 0, 0, time.UTC) // before the epoch: a negative hour
	calls[6].Usage.InputTokens, calls[6].Cost = -5, -7              // corrected lines may subtract
	want := pendingSums{}
	for i := range calls {
		want.add(&calls[i])
	}
	b := appendPending(nil, want)
	t.Run("read back, they are the sums written", func(t *testing.T) {
		got := pendingSums{}
		if err := readPending(b, got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("read %d rows, want the %d written, equal", len(got), len(want))
		}
	})
	t.Run("read into sums, they add to them", func(t *testing.T) {
		got := pendingSums{}
		for range 2 {
			if err := readPending(b, got); err != nil {
				t.Fatal(err)
			}
		}
		for k, w := range want {
			if got[k].Calls != 2*w.Calls || got[k].CostUSD != 2*w.CostUSD {
				t.Fatalf("%+v: %d calls, %d cost; want twice %d, %d", k, got[k].Calls, got[k].CostUSD, w.Calls, w.CostUSD)
			}
		}
	})
	t.Run("a cut, extended or foreign row is refused, never misread", func(t *testing.T) {
		for i := range b {
			if err := readPending(b[:i], pendingSums{}); err == nil {
				t.Fatalf("the first %d of %d bytes read without an error", i, len(b))
			}
		}
		if err := readPending(append(b[:len(b):len(b)], 0), pendingSums{}); err == nil {
			t.Fatal("a row with a byte after its rows read without an error")
		}
		more := append([]byte{pendingFormat, byte(len(rollupSums) + 1)}, b[2:]...)
		if err := readPending(more, pendingSums{}); err == nil {
			t.Fatal("a row of more sums than this build keeps read without an error")
		}
		if err := readPending(append([]byte{pendingFormat + 1}, b[1:]...), pendingSums{}); err == nil {
			t.Fatal("a row of another format read without an error")
		}
	})
	t.Run("shadow lines add nothing", func(t *testing.T) {
		p := pendingSums{}
		c := calls[0]
		c.Shadow = &Shadow{Name: "lab"}
		p.add(&c)
		if len(p) != 0 {
			t.Fatalf("a shadow line made %d pending rows", len(p))
		}
	})
}
