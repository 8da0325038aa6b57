package helm_test

// The harness of the tests that run binaries. This module shares no code with
// the proxy's (so the proxy's dependencies never reach this go.mod, nor Helm's
// the proxy's): the binaries are built from the repository root with its own
// go.mod, as the Dockerfile builds them, and driven as processes.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	// Helm's chart loader logs each symlink it follows (dashboards/) through slog's default.
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binary is the path of cmd/NAME (ctxproxy, fakeapi) built from the repository root.
func binary(t *testing.T, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "ctxproxy-helm-test"); buildErr != nil {
			return
		}
		for _, cmd := range []string{"ctxproxy", "fakeapi"} {
			c := exec.Command("go", "build", "-o", filepath.Join(binDir, cmd), "./cmd/"+cmd)
			c.Dir = "../.."
			if out, err := c.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build ./cmd/%s: %v\n%s", cmd, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, name)
}

// process is a started binary that logs JSON lines to stderr.
type process struct {
	Addr  string
	Addrs map[string]string // the addr of each line before the ready line that has one, by msg
	cmd   *exec.Cmd
	mu    sync.Mutex
	log   strings.Builder
	done  chan struct{}
}

// start runs cmd until the JSON log line whose msg is readyMsg, and takes its
// addr. The process is killed when t ends, unless stopped before.
func start(t *testing.T, cmd *exec.Cmd, readyMsg string) *process {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{Addrs: map[string]string{}, cmd: cmd, done: make(chan struct{})}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		ready := false
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			var l struct{ Msg, Addr string }
			if !ready && json.Unmarshal(sc.Bytes(), &l) == nil && l.Addr != "" {
				if l.Msg == readyMsg {
					ready = true
					addrc <- l.Addr // Addrs is complete: no writes after this
				} else {
					p.Addrs[l.Msg] = l.Addr
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	select {
	case p.Addr = <-addrc:
		return p
	case <-p.done:
		t.Fatalf("%s exited before it was ready:\n%s", cmd.Path, p.Log())
	case <-time.After(60 * time.Second): // a hang guard
		t.Fatalf("%s was not ready:\n%s", cmd.Path, p.Log())
	}
	return nil
}

func (p *process) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// stop sends SIGTERM and returns the exit code (-1: killed after the hang guard).
func (p *process) stop() int {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return -1
	}
}

// fakeUpstream is cmd/fakeapi, the Messages API double, as a process.
type fakeUpstream struct{ url string }

func startFake(t *testing.T) *fakeUpstream {
	t.Helper()
	p := start(t, exec.Command(binary(t, "fakeapi"), "--listen", "127.0.0.1:0"), "fakeapi listening")
	return &fakeUpstream{url: "http://" + p.Addr}
}

// fakeRequest is what the fake saw of one request (GET /_fake/requests).
type fakeRequest struct {
	Header http.Header     `json:"header"`
	Body   json.RawMessage `json:"body"`
}

// lastMessages is the last POST /v1/messages the fake received.
func (f *fakeUpstream) lastMessages(t *testing.T) fakeRequest {
	t.Helper()
	resp, err := http.Get(f.url + "/_fake/requests?path=/v1/messages")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var reqs []fakeRequest
	if err := json.NewDecoder(resp.Body).Decode(&reqs); err != nil {
		t.Fatal(err)
	}
	if len(reqs) == 0 {
		t.Fatal("nothing reached the upstream")
	}
	return reqs[len(reqs)-1]
}

// pgBaseURL is the machine's test database (as internal/pgtest in the root module).
func pgBaseURL() string {
	if u := os.Getenv("CTXPROXY_TEST_PG"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

var schemaSeq atomic.Int64

// testDB is a PostgreSQL schema of one test's own, dropped after it.
type testDB struct {
	URL, schema string
	admin       *pgx.Conn
}

func newTestDB(t *testing.T) *testDB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, pgBaseURL())
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL required under CI: %v", err)
		}
		t.Skipf("no PostgreSQL: %v", err)
	}
	db := &testDB{schema: fmt.Sprintf("helm_chart_test_%d_%d", os.Getpid(), schemaSeq.Add(1)), admin: admin}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+db.schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP SCHEMA "+db.schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", db.schema, err)
		}
		admin.Close(ctx)
	})
	sep := "?"
	if strings.Contains(pgBaseURL(), "?") {
		sep = "&"
	}
	db.URL = pgBaseURL() + sep + "search_path=" + db.schema
	return db
}

// tables counts the tables of the test's schema named like pattern.
func (db *testDB) tables(t *testing.T, pattern string) int64 {
	t.Helper()
	var n int64
	if err := db.admin.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename LIKE $2`, db.schema, pattern).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func keyHash(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// deploy/internal/kubevolume is a copy of the root module's internal/kubevolume (the modules share
// no code); the two must not drift apart.
func TestKubevolumeIsTheRootModulesCopy(t *testing.T) {
	a, err := os.ReadFile("../../internal/kubevolume/kubevolume.go")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../internal/kubevolume/kubevolume.go")
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Error("deploy/internal/kubevolume/kubevolume.go differs from internal/kubevolume/kubevolume.go: copy it again")
	}
}

// Helm and the Kubernetes API types stay out of the proxy's module: its go.mod does not name them,
// and `go test ./...` at the repository root does not reach this module.
func TestTheProxysModuleStaysApart(t *testing.T) {
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range []string{"helm.sh/", "k8s.io/", "sigs.k8s.io/"} {
		if strings.Contains(string(gomod), dep) {
			t.Errorf("the root go.mod names %s", dep)
		}
	}
	c := exec.Command("go", "list", "./...")
	c.Dir = "../.."
	out, err := c.Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/ctxproxy/ctxproxy/deploy") {
			t.Errorf("the root's ./... includes %s", pkg)
		}
	}
}
