package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/binaries"
	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/internal/pgtest"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/memoryhook/pgstore"
)

// Two ctxproxy processes on one database serve one fleet: 200 concurrent
// edits of one memory file, split across them. The claim is exact: every
// edit the store acknowledged (a successful tool_result went back to the
// model) is in the file, once; an edit answered with an error (the store's
// deadline, under load) may or may not have landed, and the test logs which.
// Nothing here depends on how fast the machine is.
func TestTwoReplicasOnOneDatabaseLoseNoEdit(t *testing.T) {
	const edits = 200
	db := pgtest.New(t, "replicas_test")
	fake, upURL := fakeUpstream(t)
	fake.SetResponder(func(r *fakeapi.Request) fakeapi.Reply {
		if r.AssistantTurns > 0 {
			return fakeapi.TextReply("noted")
		}
		n := gjson.GetBytes(r.Messages[0], "content").Str
		if n == "seed" {
			return fakeapi.Blocks(fakeapi.MemoryCreate("/memories/log.md", "start\n"))
		}
		if strings.HasSuffix(n, "0") {
			return fakeapi.Blocks(fakeapi.MemoryStrReplace("/memories/log.md", "start", "start "+n))
		}
		return fakeapi.Blocks(fakeapi.MemoryInsert("/memories/log.md", 1, "line "+n+"\n"))
	})
	pols := binPolicies(t)
	var replicas []*binaries.Process
	for i := range 2 {
		replicas = append(replicas, startProxy(t, "--upstream", upURL, "--policies", pols, "--memory-store", db.URL,
			"--ledger", "file:"+filepath.Join(t.TempDir(), fmt.Sprintf("l%d.jsonl", i))))
	}
	body := func(s string) string {
		return `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"` + s + `"}]}`
	}
	if resp, b := send(t, replicas[0].Addr, "/v1/messages", body("seed")); resp.StatusCode != 200 {
		t.Fatalf("seed: %d %s", resp.StatusCode, b)
	}
	var wg sync.WaitGroup
	for i := range edits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, b := send(t, replicas[i%2].Addr, "/v1/messages", body(fmt.Sprint(i))); resp.StatusCode != 200 {
				t.Errorf("edit %d: %d %s", i, resp.StatusCode, b)
			}
		}()
	}
	wg.Wait()
	acked, answers := editAnswers(t, fake)
	landed := editsInFile(t, db.URL)
	nAcked := 0
	for i := range edits {
		n := fmt.Sprint(i)
		answer, answered := answers[n]
		switch {
		case !answered:
			t.Errorf("edit %d: the model never got its tool_result", i)
		case landed[n] > 1:
			t.Errorf("edit %d is in the file %d times", i, landed[n])
		case acked[n] && landed[n] == 0:
			t.Errorf("edit %d was acknowledged (%q) but is not in the file", i, answer)
		case acked[n]:
			nAcked++
		default:
			t.Logf("edit %d answered an error (%q); it landed: %v", i, answer, landed[n] == 1)
		}
	}
	t.Logf("%d of %d edits acknowledged, all of them in the file", nAcked, edits)
}

// editAnswers reads, from what the upstream saw, the tool_result each edit
// got: acked[n] when it reported success.
func editAnswers(t *testing.T, fake *fakeapi.API) (acked map[string]bool, answers map[string]string) {
	t.Helper()
	acked, answers = map[string]bool{}, map[string]string{}
	for _, r := range proxiedCalls(fake) {
		if r.AssistantTurns != 1 || len(r.Messages) != 3 {
			continue
		}
		n := gjson.GetBytes(r.Messages[0], "content").Str
		res := gjson.GetBytes(r.Messages[2], "content.0")
		if res.Get("type").Str != "tool_result" || n == "seed" {
			continue
		}
		answers[n] = res.Get("content").Str
		acked[n] = !res.Get("is_error").Bool()
	}
	return acked, answers
}

// editsInFile counts each edit's marks in the memory file: the first line
// collects the str_replace edits, one line per insert.
func editsInFile(t *testing.T, dbURL string) map[string]int {
	t.Helper()
	st, err := pgstore.Open(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p, _ := memoryhook.ParsePath("/memories/log.md")
	view, err := st.View(t.Context(), memoryhook.Scope{Tenant: "acme", Limits: memoryhook.DefaultLimits()}, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, line := range strings.Split(view, "\n")[1:] {
		_, text, _ := strings.Cut(line, "\t")
		if rest, ok := strings.CutPrefix(text, "start"); ok {
			for _, f := range strings.Fields(rest) {
				seen[f]++
			}
		} else if n, ok := strings.CutPrefix(text, "line "); ok {
			seen[n]++
		}
	}
	return seen
}

// The database goes away under a running proxy: memory calls answer error
// results, /readyz says why, tenants without memory keep being served, and
// all comes back by itself when the database does.
func TestTheProxyRidesOutADatabaseOutage(t *testing.T) {
	db := pgtest.New(t, "outage_test")
	fwd := pgtest.NewForwarder(t, "127.0.0.1:5432")
	url, ok := fwd.URL(db.URL)
	if !ok {
		t.Skip("CTXPROXY_TEST_PG does not point at 127.0.0.1:5432")
	}
	fake, upURL := fakeUpstream(t)
	fake.SetResponder(func(r *fakeapi.Request) fakeapi.Reply {
		if r.AssistantTurns > 0 {
			return fakeapi.TextReply("ok")
		}
		return fakeapi.Blocks(fakeapi.MemoryCreate("/memories/"+gjson.GetBytes(r.Messages[0], "content").Str+".md", "x"))
	})
	p := startProxy(t, "--upstream", upURL, "--policies", binPolicies(t), "--memory-store", url,
		"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"))
	body := func(s string) string {
		return `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"` + s + `"}]}`
	}
	lastResult := func() gjson.Result {
		r, _ := fake.LastRequest("/v1/messages")
		return gjson.GetBytes(r.Body, "messages.@reverse.0.content.0")
	}
	ready := func() (int, string) {
		resp, err := http.Get("http://" + p.Addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, b := ready(); code != 200 {
		t.Fatalf("readyz before the outage: %d %s", code, b)
	}

	fwd.Set("down")
	if resp, b := send(t, p.Addr, "/v1/messages", body("during")); resp.StatusCode != 200 {
		t.Fatalf("request during the outage: %d %s", resp.StatusCode, b)
	}
	if res := lastResult(); !res.Get("is_error").Bool() || !strings.HasPrefix(res.Get("content").Str, "Error: memory store unavailable") {
		t.Fatalf("tool_result during the outage = %s", res.Raw)
	}
	if code, b := ready(); code != 503 || !strings.Contains(b, "memory store unavailable") {
		t.Fatalf("readyz during the outage: %d %s", code, b)
	}
	// A tenant without memory is served as before.
	req, _ := http.NewRequest(http.MethodPost, "http://"+p.Addr+"/v1/messages", strings.NewReader(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"plain"}]}`))
	req.Header.Set("X-Api-Key", "sk-some-other-key")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	fake.Enqueue(fakeapi.TextReply("served"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "served") {
		t.Fatalf("tenant without memory during the outage: %d %s", resp.StatusCode, b)
	}

	fwd.Set("up")
	eventually(t, "readiness coming back", func() {
		for {
			if code, _ := ready(); code == 200 {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	if resp, b := send(t, p.Addr, "/v1/messages", body("after")); resp.StatusCode != 200 {
		t.Fatalf("request after the outage: %d %s", resp.StatusCode, b)
	}
	if res := lastResult(); res.Get("is_error").Bool() || !strings.HasPrefix(res.Get("content").Str, "File created successfully") {
		t.Fatalf("tool_result after the outage = %s", res.Raw)
	}
}
