package server

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/tracing"
)

// startTracing turns traces on when the OTEL_* environment names an OTLP
// endpoint; stop flushes what is queued (bounded, at shutdown).
func startTracing(ctx context.Context, cfg *Settings, log, lifecycle *zap.Logger) (*tracing.Tracer, func(), error) {
	t, err := tracing.FromEnv(ctx, cfg.Getenv, cfg.Version)
	if err != nil {
		return nil, nil, fmt.Errorf("start tracing: %w", err)
	}
	if t == nil {
		return nil, func() {}, nil
	}
	// The SDK reports export failures here; they must not go to stderr
	// unformatted, nor stop a request.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("trace export failed", zap.Error(err))
	}))
	proto := cfg.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	if proto == "" {
		proto = "http/protobuf"
	}
	lifecycle.Info("tracing on", zap.String("protocol", proto))
	return t, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := t.Shutdown(sctx); err != nil {
			log.Warn("flush traces", zap.Error(err))
		}
	}, nil
}
