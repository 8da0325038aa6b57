package server

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/memoryhook/pgstore"
)

// openPGMemory opens the shared PostgreSQL memory store, creating or
// migrating its schema.
func openPGMemory(ctx context.Context, url string, log *zap.Logger) (memoryhook.Store, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := pgstore.Open(ctx, url)
	if err != nil {
		return nil, nil, fmt.Errorf("open PostgreSQL memory store: %w", err)
	}
	log.Info("memory store: PostgreSQL")
	return s, func() { s.Close() }, nil
}
