// Command fakeapi serves the fake Messages API of internal/fakeapi for tests,
// compat suites and demos run out of process. Script it over HTTP with the
// /_fake/ control endpoints (see the fakeapi package doc).
//
//	fakeapi --listen 127.0.0.1:8090 [--script replies.json] [--models models.json] [--compress] [--fault-rate 0.1 --fault-seed 1]
//	        [--cache on [--cache-clock wall]]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fakeapi:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("fakeapi", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8090", "address to listen on (port 0 picks one; the address is logged)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	script := fs.String("script", "", "JSON file of replies to enqueue: [Reply...] or {\"replies\":[...],\"turns\":[...]}")
	models := fs.String("models", "", "JSON file of the model table GET /v1/models serves ([Model...]; default: fakeapi.DefaultModels)")
	compress := fs.Bool("compress", false, "compress replies per Accept-Encoding (zstd, br, gzip)")
	eventDelay := fs.Duration("event-delay", 0, "delay between SSE events")
	textChunks := fs.Int("text-chunks", 3, "deltas per streamed text, thinking or tool input")
	faultRate := fs.Float64("fault-rate", 0, "probability of a random fault per POST /v1/messages")
	faultSeed := fs.Uint64("fault-seed", 1, "seed of the random faults")
	faultKinds := fs.String("fault-kinds", "", "comma-separated fault kinds (default all: "+strings.Join(fakeapi.AllFaults, ",")+")")
	noAuth := fs.Bool("no-auth-check", false, "accept requests without API key and anthropic-version")
	grace := fs.Duration("shutdown-grace", 10*time.Second, "how long open requests may finish on SIGINT/SIGTERM")
	cache := fs.String("cache", "off", "model the prompt cache and cache diagnostics: on or off (its other switches: POST /_fake/options)")
	cacheClock := fs.String("cache-clock", "manual", "the cache's clock: manual (moves only with POST /_fake/clock) or wall")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	cacheOpts, clock, err := cacheFlags(*cache, *cacheClock)
	if err != nil {
		return err
	}
	opts := fakeapi.Options{TextChunks: *textChunks, Compress: *compress, EventDelay: *eventDelay, NoAuthCheck: *noAuth,
		CacheOptions: cacheOpts}
	if *models != "" {
		if opts.Models, err = loadModels(*models); err != nil {
			return err
		}
	}
	if *faultRate > 0 {
		f := fakeapi.Faults{Rate: *faultRate, Seed: *faultSeed}
		if *faultKinds != "" {
			f.Kinds = strings.Split(*faultKinds, ",")
		}
		opts.Faults = &f
	}
	api := fakeapi.New(append(clock, fakeapi.WithOptions(opts), fakeapi.WithLogger(log))...)
	if *script != "" {
		if err := loadScript(api, *script); err != nil {
			return err
		}
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", *listen, err)
	}
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second, ErrorLog: zap.NewStdLog(log)}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("fakeapi listening", zap.String("addr", ln.Addr().String()))

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("fakeapi stopping", zap.Duration("grace", *grace))
	sctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// cacheFlags reads --cache and --cache-clock.
func cacheFlags(cache, clock string) (fakeapi.CacheOptions, []fakeapi.Option, error) {
	var o fakeapi.CacheOptions
	switch cache {
	case "on":
		o.Cache = fakeapi.On
	case "off":
		o.Cache = fakeapi.Off
	default:
		return o, nil, fmt.Errorf("--cache %q: want on or off", cache)
	}
	switch clock {
	case "manual":
		return o, nil, nil
	case "wall":
		return o, []fakeapi.Option{fakeapi.WithClock(time.Now)}, nil
	}
	return o, nil, fmt.Errorf("--cache-clock %q: want manual or wall", clock)
}

func loadScript(api *fakeapi.API, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read script: %w", err)
	}
	var s struct {
		Replies []fakeapi.Reply `json:"replies"`
		Turns   []fakeapi.Reply `json:"turns"`
	}
	if strings.HasPrefix(strings.TrimSpace(string(b)), "[") {
		err = json.Unmarshal(b, &s.Replies)
	} else {
		err = json.Unmarshal(b, &s)
	}
	if err != nil {
		return fmt.Errorf("parse script %s: %w", path, err)
	}
	api.Enqueue(s.Replies...)
	if s.Turns != nil {
		api.SetResponder(fakeapi.Script(s.Turns...))
	}
	return nil
}

// loadModels reads a model table: a JSON list of fakeapi.Model.
func loadModels(path string) ([]fakeapi.Model, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read models: %w", err)
	}
	var ms []fakeapi.Model
	if err := json.Unmarshal(b, &ms); err != nil {
		return nil, fmt.Errorf("parse models %s: %w", path, err)
	}
	for i, m := range ms {
		if m.ID == "" {
			return nil, fmt.Errorf("parse models %s: entry %d has no id", path, i)
		}
	}
	if ms == nil {
		ms = []fakeapi.Model{} // null: no model, as an empty list
	}
	return ms, nil
}

func newLogger(level string) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	return cfg.Build()
}
