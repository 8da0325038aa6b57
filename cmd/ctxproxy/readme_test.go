package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/policy"
)

// The README's first screen is what a newcomer runs: exactly two set-up
// commands, how to build a binary, and a ten-line tenant whose policy loads.
func TestREADMEFirstScreen(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	setup, _, ok := strings.Cut(readme, "\n## How it works")
	if !ok {
		t.Fatal("README has no How it works section after its first screen")
	}
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(setup, -1)
	if len(blocks) != 2 {
		t.Fatalf("the first screen has %d sh blocks, want the set-up commands and the tenant", len(blocks))
	}
	if cmds := strings.Split(strings.TrimSpace(blocks[0][1]), "\n"); len(cmds) != 2 ||
		!strings.HasPrefix(cmds[0], "go run ./cmd/ctxproxy") || !strings.HasPrefix(cmds[1], "go vet ./... && go test -race ./...") {
		t.Errorf("the set-up commands are not the two of serving and testing:\n%s", blocks[0][1])
	}
	if !strings.Contains(setup, "go build -o ctxproxy ./cmd/ctxproxy") {
		t.Error("the first screen does not say how to build a binary")
	}
	tenant := blocks[1][1]
	if n := strings.Count(tenant, "\n"); n > 10 {
		t.Errorf("the tenant takes %d lines, want ten at most", n)
	}
	if !strings.Contains(tenant, `sha256sum`) {
		t.Error("the tenant does not show the key-hash command")
	}
	yaml, _, ok := strings.Cut(tenant[strings.Index(tenant, "<<EOF\n")+len("<<EOF\n"):], "EOF\n")
	if !ok {
		t.Fatalf("no policy heredoc in:\n%s", tenant)
	}
	yaml = strings.ReplaceAll(yaml, "$HASH", strings.Repeat("ab", 32))
	if _, err := policy.Parse("acme.yaml", []byte(yaml)); err != nil {
		t.Errorf("the README's tenant does not load: %v\n%s", err, yaml)
	}
	for _, want := range []string{"#development", "#use-it-from-your-agent", "#policies", "#command-line"} {
		if !strings.Contains(setup, "("+want+")") {
			t.Errorf("the first screen does not say where %s is", want)
		}
	}
	// The clients part: which want /v1 in the base URL, and LangChain's streamed usage.
	for _, want := range []string{"Vercel AI SDK", "wants `http://127.0.0.1:8080/v1`", "LangChain", "message_start", "`.stream()`"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README lacks %q", want)
		}
	}
	if strings.Contains(setup, "chromium") || strings.Contains(setup, "node_modules") {
		t.Error("CI set-up details belong in Development, not the first screen")
	}
}
