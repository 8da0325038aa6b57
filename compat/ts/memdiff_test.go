package ts_test

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/pgtest"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/memoryhook/pgstore"
)

var (
	memdiffSeed  = flag.Int64("memdiff.seed", 0, "TestMemoryMatchesTheSDKHelper: run only this seed")
	memdiffSeeds = flag.Int("memdiff.seeds", 8, "TestMemoryMatchesTheSDKHelper: seeds to run (1..n)")
	memdiffSteps = flag.Int("memdiff.steps", 250, "TestMemoryMatchesTheSDKHelper: commands per seed")
)

// TestMemoryMatchesTheSDKHelper is a differential test: seeded random
// sequences of valid and invalid memory commands run through the official
// TypeScript SDK's BetaLocalFilesystemMemoryTool (as its tool runner calls
// it) and through ctxproxy's memoryhook over the file store and the
// PostgreSQL store, one command at a time. Every result must be the SDK's
// character for character, except where the SDK answers with a raw Node.js
// error (`Error: ENOTDIR: …, '<host path>'`) or is given a malformed input
// (a field missing or of the wrong type, an unknown command), where ctxproxy
// must refuse too, in its own sentence, writing nothing. After every command the SDK's tree and the file
// store's tree must hold the same files with the same bytes, and the
// PostgreSQL store must answer exactly as the file store does.
//
// The generator leaves out the inputs where ctxproxy is deliberately
// stricter and the SDK would write where ctxproxy refuses (the README's
// Memory section lists them, with reasons); the golden transcripts of
// memoryhook/storetest pin ctxproxy's answers there. A failure names the
// seed: go test ./compat/ts/ -run MemoryMatches -memdiff.seed=N -v.
func TestMemoryMatchesTheSDKHelper(t *testing.T) {
	node := need(t, "node")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	installSDK(ctx, t)
	db := pgtest.New(t, "memdiff")
	pg, err := pgstore.Open(ctx, db.URL, pgstore.WithApplicationName(db.App))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })

	seeds := []int64{*memdiffSeed}
	if *memdiffSeed == 0 {
		seeds = seeds[:0]
		for s := range *memdiffSeeds {
			seeds = append(seeds, int64(s+1))
		}
	}
	var total diffStats
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			st := runSeed(ctx, t, node, pg, seed)
			total.add(st)
		})
	}
	t.Logf("%d calls per store: %d answered alike; ctxproxy refused in its own words %d where the SDK leaked a raw OS error and %d malformed inputs",
		total.calls, total.equal, total.rawOS, total.malformed)
}

type diffStats struct{ calls, equal, rawOS, malformed int }

func (s *diffStats) add(o diffStats) {
	s.calls += o.calls
	s.equal += o.equal
	s.rawOS += o.rawOS
	s.malformed += o.malformed
}

// runSeed runs one seeded sequence against fresh stores.
func runSeed(ctx context.Context, t *testing.T, node string, pg memoryhook.Store, seed int64) diffStats {
	fileStore, err := memoryhook.NewFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fileStore.Close() })
	// Large limits: the SDK has none, and views must not be cut.
	sc := memoryhook.Scope{Tenant: fmt.Sprintf("s%d", seed), Limits: memoryhook.Limits{MaxViewChars: 1 << 24}}
	memoryhook.Exec(ctx, fileStore, sc, []byte(`{"command":"view","path":"/memories"}`)) // makes the tenant directory
	sdk := startSDK(ctx, t, node)
	g := newGen(seed, filepath.Join(fileStore.Dir(), sc.Tenant))

	var st diffStats
	var history []string
	for step := range *memdiffSteps {
		in := g.next()
		history = append(history, string(in))
		want := sdk.run(t, in)
		got := memoryhook.Exec(ctx, fileStore, sc, in)
		gotPG := memoryhook.Exec(ctx, pg, sc, in)
		fail := func(format string, args ...any) {
			t.Fatalf("seed %d, step %d: %s\nlast inputs:\n%s", seed, step, fmt.Sprintf(format, args...),
				strings.Join(history[max(0, len(history)-12):], "\n"))
		}
		st.calls++
		switch {
		case got.Content == want.Content && got.IsError == want.IsError:
			st.equal++
		case rawOSError.MatchString(want.Content) && want.IsError && got.IsError && !got.Unavailable:
			st.rawOS++
		case inputError.MatchString(got.Content) && want.IsError && !got.Wrote:
			st.malformed++
		default:
			fail("%s\nSDK:      %q (is_error %v)\nctxproxy: %q (is_error %v)", in, want.Content, want.IsError, got.Content, got.IsError)
		}
		if a, b := dirSizesMasked(got.Content), dirSizesMasked(gotPG.Content); a != b || got.IsError != gotPG.IsError {
			fail("%s\nfile store: %q\nPostgreSQL: %q", in, got.Content, gotPG.Content)
		}
		if a, b := tree(t, sdk.root), tree(t, g.dir); a != b {
			fail("%s\nthe trees differ after it\nSDK:\n%s\nfile store:\n%s", in, a, b)
		}
	}
	return st
}

// rawOSError is how Node.js words a system error the SDK passes on as is,
// host path included: `ENOTDIR: not a directory, stat '/tmp/…'`.
var rawOSError = regexp.MustCompile(`^Error: E[A-Z]+: `)

// inputError is ctxproxy's refusal of a malformed input, given before the
// store is asked: the SDK fails too, in JavaScript (`Cannot read properties
// of undefined`), or later, on what the path is (`does not exist`).
var inputError = regexp.MustCompile("^Error: (Missing required parameter `|Parameter `[a-z_]+` of command `[a-z_]+` must be |unknown memory command )")

// dirSizesMasked masks the sizes of directories in a listing: the file
// store prints st_size, the PostgreSQL store 4K.
func dirSizesMasked(s string) string {
	if !strings.HasPrefix(s, "Here're the files and directories") {
		return s
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if size, rest, ok := strings.Cut(l, "\t"); ok && (i == 1 || strings.HasSuffix(rest, "/")) {
			lines[i] = strings.Repeat("#", len(size)) + "\t" + rest
		}
	}
	return strings.Join(lines, "\n")
}

// tree renders every directory and file below root with the file's bytes,
// leaving out temporary files a write may leave behind.
func tree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		if strings.HasPrefix(d.Name(), ".tmp-") {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			fmt.Fprintf(&b, "%s/\n", rel)
			return nil
		}
		data, err := os.ReadFile(p)
		fmt.Fprintf(&b, "%s %q\n", rel, data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// sdkHelper is a node process running compat/ts/memdiff/sdk.mjs.
type sdkHelper struct {
	root string // the helper's /memories
	in   io.WriteCloser
	out  *bufio.Scanner
}

type sdkResult struct {
	Content string `json:"content"`
	IsError bool   `json:"is_error"`
}

func startSDK(ctx context.Context, t *testing.T, node string) *sdkHelper {
	t.Helper()
	base := t.TempDir()
	cmd := exec.CommandContext(ctx, node, "memdiff/sdk.mjs", base)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("sdk.mjs: %v", err)
		}
	})
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	return &sdkHelper{root: filepath.Join(base, "memories"), in: in, out: sc}
}

func (h *sdkHelper) run(t *testing.T, input []byte) sdkResult {
	t.Helper()
	if _, err := h.in.Write(append(input, '\n')); err != nil {
		t.Fatalf("sdk.mjs: %v", err)
	}
	if !h.out.Scan() {
		t.Fatalf("sdk.mjs stopped answering: %v", h.out.Err())
	}
	var r sdkResult
	if err := json.Unmarshal(h.out.Bytes(), &r); err != nil {
		t.Fatalf("sdk.mjs: %v: %s", err, h.out.Bytes())
	}
	return r
}
