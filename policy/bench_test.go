package policy

import (
	"fmt"

	"github.com/ctxproxy/ctxproxy/capabilities"
	"net/http"
	"strings"
	"testing"
)

var benchPolicy = func() *Policy {
	p, err := Parse("bench.yaml", []byte(`tenant: bench
context_management:
  mode: default
  clear_thinking: {keep: all}
  clear_tool_uses:
    trigger: {type: input_tokens, value: 100000}
    keep: {type: tool_uses, value: 3}
    clear_at_least: {type: input_tokens, value: 5000}
memory: {mode: proxy}
`))
	if err != nil {
		panic(err)
	}
	return p
}()

const benchTools = `[{"name":"bash","description":"Run a shell command and return its output.","input_schema":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}},` +
	`{"name":"read_file","description":"Read a file from the workspace.","input_schema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}]`

// smallBody is a ~2 KB request: a system prompt, two tools, a short tool exchange.
func smallBody() []byte {
	var b strings.Builder
	b.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":8192,"stream":true,"thinking":{"type":"enabled","budget_tokens":4096},`)
	b.WriteString(`"system":"You are a careful coding agent. Prefer small, reviewed changes. Caf\u00e9 \u2014 notes:\n` + strings.Repeat("Follow the repository conventions. ", 30) + `",`)
	b.WriteString(`"tools":` + benchTools + `,"messages":[`)
	b.WriteString(`{"role":"user","content":"List the Go files and tell me which one is the largest."},`)
	b.WriteString(`{"role":"assistant","content":[{"type":"thinking","thinking":"I should list files.","signature":"c2lnbmF0dXJl"},{"type":"tool_use","id":"toolu_01","name":"bash","input":{"command":"ls -la *.go"}}]},`)
	b.WriteString(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":"-rw-r--r-- 1 u u 12034 main.go\n-rw-r--r-- 1 u u 2.5e3 util.go"}]}]}`)
	return []byte(b.String())
}

// transcript is a tool-loop request of n turns, each a tool_use and a ~5 KB tool_result.
func transcript(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":8192,"stream":true,"thinking":{"type":"enabled","budget_tokens":4096},`)
	b.WriteString(`"system":"You are a coding agent.","tools":` + benchTools + `,"messages":[{"role":"user","content":"Audit the repository."}`)
	out := strings.Repeat(`func handler(w http.ResponseWriter, r *http.Request) {\n\tfmt.Fprintf(w, \"caf\u00e9 %d\", 42)\n}\n`, 48)
	for i := range n {
		fmt.Fprintf(&b, `,{"role":"assistant","content":[{"type":"thinking","thinking":"Next file.","signature":"c2ln%04d"},{"type":"tool_use","id":"toolu_%04d","name":"read_file","input":{"path":"pkg/file%04d.go"}}]}`, i, i, i)
		fmt.Fprintf(&b, `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_%04d","content":"%s"}]}`, i, out)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

func benchRewrite(b *testing.B, body []byte) { benchRewriteWith(b, benchPolicy, body) }

func benchRewriteWith(b *testing.B, p *Policy, body []byte) {
	h := http.Header{"Anthropic-Beta": {"interleaved-thinking-2025-05-14"}}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		delete(h, "Anthropic-Beta")
		h["Anthropic-Beta"] = []string{"interleaved-thinking-2025-05-14"}
		out, _, err := p.Rewrite(body, h)
		if err != nil || len(out) <= len(body) {
			b.Fatal(err)
		}
	}
}

func BenchmarkRewriteSmall(b *testing.B) { benchRewrite(b, smallBody()) }

// BenchmarkRewriteSmallWithModels is BenchmarkRewriteSmall with the edits decided from the
// model's capabilities (what package capabilities' Cache answers: a lookup in a map): the cost
// of the models endpoint on the request path.
func BenchmarkRewriteSmallWithModels(b *testing.B) {
	p := *benchPolicy
	p.models = stubModels{"claude-sonnet-4-5": {ClearThinking: capabilities.Yes, ClearToolUses: capabilities.Yes, Compact: capabilities.No}}
	benchRewriteWith(b, &p, smallBody())
}

func BenchmarkRewrite1MB(b *testing.B) {
	body := transcript(200)
	if len(body) < 1<<20-100<<10 || len(body) > 1<<20+100<<10 {
		b.Fatalf("transcript is %d bytes, want about 1 MiB", len(body))
	}
	benchRewrite(b, body)
}

func BenchmarkMergeBeta(b *testing.B) {
	const claudeCode = "claude-code-20250219,oauth-2025-04-20,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14"
	b.ReportAllocs()
	h := http.Header{}
	for b.Loop() {
		h["Anthropic-Beta"] = []string{claudeCode}
		MergeBeta(h, BetaContextManagement)
	}
}

func TestBenchBodiesAreValidRequests(t *testing.T) {
	for name, body := range map[string][]byte{"small": smallBody(), "1MB": transcript(200)} {
		out, info, err := benchPolicy.Rewrite(body, http.Header{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !info.MemoryAdded || len(info.Edits) != 2 {
			t.Errorf("%s: %+v", name, info)
		}
		checkUntouched(t, body, out)
		t.Logf("%s: %d bytes", name, len(body))
	}
}

// BenchmarkRewriteParts1MB is what the proxy runs on a large body: the rewrite as pieces that alias
// the body, nothing copied.
func BenchmarkRewriteParts1MB(b *testing.B) {
	body := transcript(200)
	h := http.Header{}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		delete(h, "Anthropic-Beta")
		parts, _, err := benchPolicy.RewriteParts(body, h)
		if err != nil || len(parts) < 2 {
			b.Fatal(err)
		}
	}
}

// BenchmarkSkim1MB is the skim of a 1 MiB transcript's messages: by 64-byte blocks (each block
// walk this CPU runs) and stopping at each quote (what CPUs without AVX2 run).
func BenchmarkSkim1MB(b *testing.B) {
	body := transcript(200)
	at := strings.Index(string(body), `"messages":`) + len(`"messages":`)
	run := func(b *testing.B, skim func([]byte, int, int) (int, *scanError)) {
		b.SetBytes(int64(len(body) - at))
		for b.Loop() {
			if end, err := skim(body, at, 1); err != nil || end != len(body)-1 {
				b.Fatal(end, err)
			}
		}
	}
	for _, k := range skimKernels() {
		b.Run("blocks/"+k.name, func(b *testing.B) {
			defer useSkimKernel(k)()
			run(b, skimValueBlocks)
		})
	}
	b.Run("bytes", func(b *testing.B) { run(b, skimValueBytes) })
}

// BenchmarkSkimCold1MB is BenchmarkSkim1MB on bodies that have left the core's caches: it walks
// 48 copies of the transcript in turn (48 MiB, past any L2), as the proxy meets a body the kernel
// has just copied in while other processes ran.
func BenchmarkSkimCold1MB(b *testing.B) {
	body := transcript(200)
	at := strings.Index(string(body), `"messages":`) + len(`"messages":`)
	copies := make([][]byte, 48)
	for i := range copies {
		copies[i] = append([]byte(nil), body...)
	}
	for _, k := range skimKernels() {
		b.Run("blocks/"+k.name, func(b *testing.B) {
			defer useSkimKernel(k)()
			b.SetBytes(int64(len(body) - at))
			i := 0
			for b.Loop() {
				c := copies[i%len(copies)]
				i++
				if end, err := skimValueBlocks(c, at, 1); err != nil || end != len(c)-1 {
					b.Fatal(end, err)
				}
			}
		})
	}
}
