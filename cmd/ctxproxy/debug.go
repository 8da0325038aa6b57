package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
)

// debugHandler serves what --debug-addr exposes: net/http/pprof under
// /debug/pprof/ and /debug/stats. It lives on its own listener, never the
// proxy's: profiles show the internals of tenants' requests.
func debugHandler() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("/debug/pprof/", pprof.Index)
	m.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	m.HandleFunc("/debug/pprof/profile", pprof.Profile)
	m.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	m.HandleFunc("/debug/pprof/trace", pprof.Trace)
	m.HandleFunc("/debug/stats", serveStats)
	return m
}

// debugStats is /debug/stats: exact live-memory numbers, which the
// Prometheus Go collector on /metrics only samples between collections.
type debugStats struct {
	Goroutines int    `json:"goroutines"`
	HeapInuse  uint64 `json:"heap_inuse"`
	HeapAlloc  uint64 `json:"heap_alloc"`
	StackInuse uint64 `json:"stack_inuse"`
	Sys        uint64 `json:"sys"`
	NumGC      uint32 `json:"num_gc"`
}

// serveStats answers debugStats; with ?gc=1 it collects first, so the heap
// numbers are what is live.
func serveStats(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("gc") == "1" {
		runtime.GC()
		runtime.GC() // and what the first one's finalizers let go
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(debugStats{Goroutines: runtime.NumGoroutine(), HeapInuse: ms.HeapInuse,
		HeapAlloc: ms.HeapAlloc, StackInuse: ms.StackInuse, Sys: ms.Sys, NumGC: ms.NumGC})
}

// isLoopback: addr is bound to a loopback address only.
func isLoopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
