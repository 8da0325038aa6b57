package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// target is where a row's load goes and how its requests look.
type target struct {
	url    string // base URL
	key    string // x-api-key: picks the tenant
	memory bool   // X-Bench-Memory: 1 (the fake makes one memory call)
	write  bool   // with memory: X-Bench-Memory: write (the call writes, see newBenchFake)
	warmup bool   // X-Bench-Warmup: 1 (the fake streams without event delay)
	beta   string // anthropic-beta, when set
}

// newClient is the load generator's client: one shared transport with
// enough idle connections for every worker, all on 127.0.0.1.
func newClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns + 16,
		MaxIdleConnsPerHost: conns + 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
}

func (t target) request(ctx context.Context, body []byte) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, t.url+"/v1/messages", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("X-Api-Key", t.key)
	switch {
	case t.memory && t.write:
		req.Header.Set("X-Bench-Memory", "write")
	case t.memory:
		req.Header.Set("X-Bench-Memory", "1")
	}
	if t.beta != "" {
		req.Header.Set("Anthropic-Beta", t.beta)
	}
	if t.warmup {
		req.Header.Set("X-Bench-Warmup", "1")
	}
	return req
}

// do sends one non-streaming request and reads the whole reply.
func do(ctx context.Context, c *http.Client, t target, body []byte) error {
	resp, err := c.Do(t.request(ctx, body))
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// loadResult is one closed-loop phase.
type loadResult struct {
	n, errs  int
	elapsed  time.Duration
	lat      []time.Duration // sorted
	firstErr error
}

func (r loadResult) rps() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.n) / r.elapsed.Seconds()
}

// closedLoop runs conc workers sending body back to back for dur, after a
// warmup that is not counted. maxN > 0 stops earlier after that many
// requests in all.
func closedLoop(ctx context.Context, c *http.Client, t target, body []byte, conc int, warmup, dur time.Duration, maxN int) loadResult {
	if warmup > 0 {
		wctx, cancel := context.WithTimeout(ctx, warmup)
		var wg sync.WaitGroup
		for range conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for wctx.Err() == nil {
					do(wctx, c, t, body)
				}
			}()
		}
		wg.Wait()
		cancel()
	}
	var (
		mu       sync.Mutex
		res      loadResult
		count    atomic.Int64
		wg       sync.WaitGroup
		deadline = time.Now().Add(dur)
	)
	// Requests still running at the deadline finish (bounded by this).
	rctx, cancel := context.WithTimeout(ctx, dur+30*time.Second)
	defer cancel()
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			n, errs := 0, 0
			var first error
			for time.Now().Before(deadline) && rctx.Err() == nil {
				if maxN > 0 && count.Add(1) > int64(maxN) {
					break
				}
				t0 := time.Now()
				if err := do(rctx, c, t, body); err != nil {
					errs++
					if first == nil {
						first = err
					}
					continue
				}
				lat = append(lat, time.Since(t0))
				n++
			}
			mu.Lock()
			res.n += n
			res.errs += errs
			res.lat = append(res.lat, lat...)
			if res.firstErr == nil {
				res.firstErr = first
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	slices.Sort(res.lat)
	return res
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
}

// streamResult is one wave of concurrent streams.
type streamResult struct {
	n, errs   int
	firstErr  error
	elapsed   time.Duration
	ttfb      []time.Duration // request sent → first byte of the stream, sorted
	events    []time.Duration // fake's send → client's read, per stamped event, sorted
	eventsPer int             // events seen per complete stream (the last one)
}

// streams opens n streaming requests at once and reads each to its end.
// onOpen is called once when all n have their first byte (nil: never).
func streams(ctx context.Context, c *http.Client, t target, body []byte, n int, timeout time.Duration, onOpen func()) streamResult {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var (
		mu   sync.Mutex
		res  streamResult
		wg   sync.WaitGroup
		open atomic.Int64
		once sync.Once
	)
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ttfb, evs, count, err := oneStream(ctx, c, t, body, func() {
				if open.Add(1) == int64(n) && onOpen != nil {
					once.Do(func() { go onOpen() })
				}
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.errs++
				if res.firstErr == nil {
					res.firstErr = err
				}
				return
			}
			res.n++
			res.ttfb = append(res.ttfb, ttfb)
			res.events = append(res.events, evs...)
			res.eventsPer = count
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	slices.Sort(res.ttfb)
	slices.Sort(res.events)
	return res
}

var (
	textDeltaTag = []byte(`"text_delta"`)
	stampTag     = []byte("t=")
	messageStop  = []byte("event: message_stop")
)

// oneStream reads one stream: time to first byte, the delivery latency of
// every stamped text delta, and the number of events.
func oneStream(ctx context.Context, c *http.Client, t target, body []byte, first func()) (time.Duration, []time.Duration, int, error) {
	t0 := time.Now()
	resp, err := c.Do(t.request(ctx, body))
	if err != nil {
		return 0, nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, nil, 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	var ttfb time.Duration
	evs := make([]time.Duration, 0, 256)
	events := 0
	stopped := false
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			now := time.Now()
			if ttfb == 0 {
				ttfb = now.Sub(t0)
				first()
			}
			switch {
			case len(line) <= 2 && (line[0] == '\n' || line[0] == '\r'):
				events++
			case bytes.HasPrefix(line, messageStop):
				stopped = true
			case bytes.HasPrefix(line, []byte("data:")) && bytes.Contains(line, textDeltaTag):
				for rest := line; ; {
					i := bytes.Index(rest, stampTag)
					if i < 0 || len(rest) < i+2+19 {
						break
					}
					if ns, perr := strconv.ParseInt(string(rest[i+2:i+2+19]), 10, 64); perr == nil {
						evs = append(evs, time.Duration(now.UnixNano()-ns))
					}
					rest = rest[i+2+19:]
				}
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, nil, 0, err
		}
	}
	if !stopped {
		return 0, nil, 0, fmt.Errorf("stream ended without message_stop after %d events", events)
	}
	return ttfb, evs, events, nil
}
