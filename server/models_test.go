package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ctxproxy/ctxproxy/capabilities"
	"github.com/ctxproxy/ctxproxy/internal/testwait"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// A ledger that cannot be read at start is a warning without the host path; the start goes on.
func TestSeedModelUsageWarnsOfAnUnreadableLedgerWithoutItsPath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.jsonl")
	l, err := tokens.OpenFileLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Remove(path); err != nil { // gone under the open ledger: reading it fails
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	stop := seedModelUsage(context.Background(), l, capabilities.New(capabilities.Options{}), zap.New(core))
	testwait.Eventually(t, "the warning", func() { // the read runs beside the start
		for logs.Len() == 0 {
			time.Sleep(time.Millisecond)
		}
	})
	stop()
	entries := logs.All()
	if len(entries) != 1 || !strings.Contains(entries[0].Message, "cannot read from the ledger") {
		t.Fatalf("logged %+v", entries)
	}
	for k, v := range entries[0].ContextMap() {
		if s, _ := v.(string); strings.Contains(s, dir) || strings.Contains(k, "tenant") {
			t.Errorf("the warning carries %s=%v", k, v)
		}
	}
	if _, ok := entries[0].ContextMap()["error"]; !ok {
		t.Error("the warning has no cause")
	}
}
