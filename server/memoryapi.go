package server

import (
	"context"
	"net/http"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/keys"
	"github.com/ctxproxy/ctxproxy/memapi"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
)

// retentionEvery is how often the versions past each tenant's
// memory.history retention are pruned.
const retentionEvery = 10 * time.Minute

// MemoryAuditPath is --memory-audit (audit), by default memory-audit.jsonl
// beside the file store and keys.json (in the data folder, the parent of
// --memory-dir), not in the working directory.
func MemoryAuditPath(audit, memoryDir string) string {
	if audit != "" {
		return audit
	}
	return filepath.Join(filepath.Dir(memoryDir), "memory-audit.jsonl")
}

// memoryOperatorAPI builds /v1/memory_stores over the memory store and
// starts pruning its history in the background; stop ends both. The audit
// log is returned for the console, which records its actions there too.
func memoryOperatorAPI(ctx context.Context, cfg *Settings, mem memoryhook.Store, pols *policy.Store, ring *keys.Keyring, log *zap.Logger) (http.Handler, *memapi.Audit, func(), error) {
	st, ok := mem.(memoryhook.Governed)
	if !ok {
		return nil, nil, func() {}, nil
	}
	audit, err := memapi.OpenAudit(MemoryAuditPath(cfg.MemoryAudit, cfg.MemoryDir))
	if err != nil {
		return nil, nil, nil, err
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		memapi.RunRetention(pctx, st, pols, log, retentionEvery)
	}()
	api := memapi.New(memapi.Config{Store: st, Policies: pols, AdminToken: cfg.AdminToken, Audit: audit, Log: log, Users: memapi.KeyUsers(ring)})
	return api, audit, func() {
		cancel()
		<-done
		audit.Close()
	}, nil
}
