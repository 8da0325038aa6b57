package server

import "time"

// DefaultSettings are serve's defaults, written once, here. The serve flags
// take theirs from these (ctxproxy --help prints them), the tests hold
// docker-compose.yml, the Dockerfile and, through compose, the Helm chart to
// those flags, and Open gives a zero MaxBody, UpstreamTimeout or
// StreamIdleTimeout its value here: the proxy has no defaults of its own.
var DefaultSettings = Settings{
	Upstream:          "https://api.anthropic.com",
	Policies:          "./policies",
	MemoryDir:         "./data/memories",
	MemoryStore:       "file",
	MaxBody:           32 << 20,
	Ledger:            "file:./data/ledger.jsonl",
	UpstreamTimeout:   10 * time.Minute,
	StreamIdleTimeout: 5 * time.Minute,
}

// The defaults of what the binary runs itself, outside Settings: its
// listener, its log and its graceful stop.
const (
	DefaultListen        = "127.0.0.1:8080"
	DefaultLogLevel      = "info"
	DefaultShutdownGrace = 30 * time.Second
)

// withDefaults is cfg with its zero limits and timeouts at DefaultSettings'.
func (cfg Settings) withDefaults() Settings {
	d := DefaultSettings
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = d.MaxBody
	}
	if cfg.UpstreamTimeout <= 0 {
		cfg.UpstreamTimeout = d.UpstreamTimeout
	}
	if cfg.StreamIdleTimeout <= 0 {
		cfg.StreamIdleTimeout = d.StreamIdleTimeout
	}
	return cfg
}
