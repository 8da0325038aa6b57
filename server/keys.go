package server

import (
	"context"
	"net/http"
	"path/filepath"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/pgurl"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/admin"
	"github.com/ctxproxy/ctxproxy/keys"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// openKeyring opens the store of ctxproxy's own keys: the memory store's
// PostgreSQL database when it has one (every replica sees the same keys),
// else keys.json in the data folder (the parent of --memory-dir). stop ends
// the last-use writer and closes the store.
func openKeyring(ctx context.Context, cfg *Settings, log *zap.Logger) (_ *keys.Keyring, stop func(), err error) {
	var store keys.Store
	if spec := cfg.MemoryStore; pgurl.Is(spec) {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if store, err = keys.OpenPGStore(octx, spec); err != nil {
			return nil, nil, err
		}
		log.Info("key store: PostgreSQL")
	} else {
		dir := filepath.Dir(filepath.Clean(cfg.MemoryDir))
		if store, err = keys.OpenFileStore(dir); err != nil {
			return nil, nil, err
		}
		log.Info("key store: file", zap.String("file", keys.FileName))
	}
	ring := keys.NewKeyring(store)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ring.Run(runCtx)
	}()
	return ring, func() {
		cancel()
		<-done
		store.Close()
	}, nil
}

// adminHandler is the operator API: /admin/report and /admin/keys, under
// --admin-token (every tenant) or a tenant's operator token
// (operator_tokens_sha256, its own tenant only).
// caps is spend against the tenants' caps, for the report.
func adminHandler(cfg *Settings, ledger tokens.Ledger, ring *keys.Keyring, pols *policy.Store, log *zap.Logger, caps tokens.CapsFunc) http.Handler {
	return admin.New(admin.Config{
		Auth:   adminAuth(cfg, pols),
		Report: tokens.NewReportHandler(ledger, tokens.WithLogger(log), tokens.WithCaps(caps)),
		Keys:   ring,
		Tenant: func(name string) (bool, bool) {
			p := pols.Current().Tenant(name)
			_, own := p.UpstreamKey()
			return p != nil, own
		},
		Log: log,
	})
}

// adminAuth is who may use /admin and the console: --admin-token (every
// tenant) or a tenant's operator token (its own tenant only).
func adminAuth(cfg *Settings, pols *policy.Store) admin.Auth {
	return admin.PolicyAuth(cfg.AdminToken, pols)
}
