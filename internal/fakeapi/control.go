package fakeapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// replyJSON is the JSON form of a Reply (see the package doc).
type replyJSON struct {
	ID           string                     `json:"id,omitempty"`
	Model        string                     `json:"model,omitempty"`
	Text         string                     `json:"text,omitempty"`
	Content      []json.RawMessage          `json:"content,omitempty"`
	StopReason   string                     `json:"stop_reason,omitempty"`
	StopSequence string                     `json:"stop_sequence,omitempty"`
	Usage        *Usage                     `json:"usage,omitempty"`
	RawUsage     json.RawMessage            `json:"raw_usage,omitempty"`
	AppliedEdits []json.RawMessage          `json:"applied_edits,omitempty"`
	Status       int                        `json:"status,omitempty"`
	Error        *APIError                  `json:"error,omitempty"`
	Header       map[string]json.RawMessage `json:"header,omitempty"`
	DelayMS      float64                    `json:"delay_ms,omitempty"`
	EventDelayMS float64                    `json:"event_delay_ms,omitempty"`
	TextChunks   int                        `json:"text_chunks,omitempty"`
	CutAfter     int                        `json:"cut_after,omitempty"`
	Drop         bool                       `json:"drop,omitempty"`
	ErrorEvent   *APIError                  `json:"error_event,omitempty"`
	ErrorAfter   int                        `json:"error_after,omitempty"`
	Encoding     string                     `json:"encoding,omitempty"`

	// ErrorCode is a shorthand for ErrorCodeReply(code): status, error and
	// details of the code, unless status or error are given too.
	ErrorCode string `json:"error_code,omitempty"`
}

func ms(d time.Duration) float64     { return float64(d) / float64(time.Millisecond) }
func fromMS(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// MarshalJSON writes the JSON form of a Reply.
func (r Reply) MarshalJSON() ([]byte, error) {
	j := replyJSON{ID: r.ID, Model: r.Model, Content: r.Content, StopReason: r.StopReason,
		StopSequence: r.StopSequence, Usage: r.Usage, RawUsage: r.RawUsage, AppliedEdits: r.AppliedEdits, Status: r.Status,
		Error: r.Error, DelayMS: ms(r.Delay), EventDelayMS: ms(r.EventDelay), TextChunks: r.TextChunks,
		CutAfter: r.CutAfter, Drop: r.Drop, ErrorEvent: r.ErrorEvent, ErrorAfter: r.ErrorAfter, Encoding: r.Encoding}
	if len(r.Header) > 0 {
		j.Header = map[string]json.RawMessage{}
		for k, v := range r.Header {
			j.Header[k] = mustJSON(v)
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads the JSON form of a Reply. "text" is a shorthand for
// one text block placed before "content"; header values may be a string or
// a list of strings.
func (r *Reply) UnmarshalJSON(b []byte) error {
	var j replyJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Reply{ID: j.ID, Model: j.Model, Content: j.Content, StopReason: j.StopReason,
		StopSequence: j.StopSequence, Usage: j.Usage, RawUsage: j.RawUsage, AppliedEdits: j.AppliedEdits, Status: j.Status,
		Error: j.Error, Delay: fromMS(j.DelayMS), EventDelay: fromMS(j.EventDelayMS), TextChunks: j.TextChunks,
		CutAfter: j.CutAfter, Drop: j.Drop, ErrorEvent: j.ErrorEvent, ErrorAfter: j.ErrorAfter, Encoding: j.Encoding}
	if j.Text != "" {
		r.Content = append([]json.RawMessage{Text(j.Text)}, r.Content...)
	}
	if j.ErrorCode != "" {
		coded := ErrorCodeReply(j.ErrorCode)
		if r.Status == 0 {
			r.Status = coded.Status
		}
		if r.Error == nil {
			r.Error = coded.Error
		}
	}
	for i, blk := range r.Content {
		var probe struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(blk, &probe); err != nil || probe.Type == "" {
			return fmt.Errorf("content.%d: a block needs a type", i)
		}
	}
	if len(j.Header) > 0 {
		r.Header = http.Header{}
		for k, raw := range j.Header {
			var one string
			if json.Unmarshal(raw, &one) == nil {
				r.Header.Add(k, one)
				continue
			}
			var many []string
			if err := json.Unmarshal(raw, &many); err != nil {
				return fmt.Errorf("header %s: want a string or a list of strings", k)
			}
			for _, v := range many {
				r.Header.Add(k, v)
			}
		}
	}
	return nil
}

// scriptJSON is the body of POST /_fake/script.
type scriptJSON struct {
	Reset   bool    `json:"reset"`
	Replies []Reply `json:"replies"`
	Turns   []Reply `json:"turns"`
}

// optionsJSON is the body of /_fake/options.
type optionsJSON struct {
	Options
	EventDelayMS    float64 `json:"event_delay_ms"`
	FaultMaxDelayMS float64 `json:"fault_max_delay_ms,omitempty"`
}

// RequestJSON is the JSON form of a recorded Request (GET /_fake/requests).
type RequestJSON struct {
	Seq               int64             `json:"seq"`
	Time              time.Time         `json:"time"`
	Method            string            `json:"method"`
	Path              string            `json:"path"`
	Query             string            `json:"query"`
	Header            http.Header       `json:"header"`
	Credential        string            `json:"credential"`
	Body              json.RawMessage   `json:"body"` // the body when it is JSON, else a JSON string of it
	Model             string            `json:"model,omitempty"`
	Stream            bool              `json:"stream"`
	CountTokens       bool              `json:"count_tokens,omitempty"`
	Betas             []string          `json:"betas"`
	Thread            string            `json:"thread,omitempty"`
	PreviousMessageID string            `json:"previous_message_id,omitempty"`
	Messages          []json.RawMessage `json:"messages"`
	Tools             json.RawMessage   `json:"tools"`
	AssistantTurns    int               `json:"assistant_turns"`
	Status            int               `json:"status"`
	ReplyID           string            `json:"reply_id,omitempty"`
	Error             *APIError         `json:"error,omitempty"`
	Outcome           string            `json:"outcome"`

	// InputTransformations: what thinking block binding did.
	InputTransformations []InputTransformation `json:"input_transformations,omitempty"`
}

func (r *Request) toJSON() RequestJSON {
	body := json.RawMessage(r.Body)
	if !json.Valid(r.Body) {
		body = mustJSON(string(r.Body))
	}
	tools := r.Tools
	if len(tools) == 0 {
		tools = json.RawMessage("null")
	}
	return RequestJSON{Seq: r.Seq, Time: r.Time, Method: r.Method, Path: r.Path, Query: r.RawQuery,
		Header: r.Header, Credential: r.Credential, Body: body, Model: r.Model, Stream: r.Stream, CountTokens: r.CountTokens,
		Betas: r.Betas, Thread: r.Thread, PreviousMessageID: r.PreviousMessageID, Messages: r.Messages,
		Tools: tools, AssistantTurns: r.AssistantTurns, Status: r.Status, ReplyID: r.ReplyID,
		Error: r.Error, Outcome: r.Outcome, InputTransformations: r.InputTransformations}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(jsonIndent(v))
}

func (a *API) serveControl(w http.ResponseWriter, req *http.Request) {
	bad := func(msg string) {
		writeError(w, 400, &APIError{Type: "invalid_request_error", Message: msg}, "")
	}
	route := req.Method + " " + req.URL.Path
	switch route {
	case "GET /_fake/health":
		writeJSON(w, 200, map[string]any{"ok": true, "pending": a.Pending()})
	case "POST /_fake/reset":
		a.Reset()
		writeJSON(w, 200, map[string]any{"ok": true})
	case "POST /_fake/script":
		b, err := io.ReadAll(io.LimitReader(req.Body, MaxBodyBytes))
		if err != nil {
			bad("read body: " + err.Error())
			return
		}
		var s scriptJSON
		if t := strings.TrimSpace(string(b)); strings.HasPrefix(t, "[") {
			err = json.Unmarshal(b, &s.Replies)
		} else {
			err = json.Unmarshal(b, &s)
		}
		if err != nil {
			bad("script: " + err.Error())
			return
		}
		if s.Reset {
			a.Reset()
		}
		a.Enqueue(s.Replies...)
		if s.Turns != nil {
			a.SetResponder(Script(s.Turns...))
		}
		writeJSON(w, 200, map[string]any{"queued": len(s.Replies), "turns": len(s.Turns), "pending": a.Pending()})
	case "GET /_fake/requests":
		q := req.URL.Query()
		since, _ := strconv.ParseInt(q.Get("since"), 10, 64)
		path := q.Get("path")
		out := []RequestJSON{}
		for _, r := range a.Requests() {
			if r.Seq > since && (path == "" || r.Path == path) {
				out = append(out, r.toJSON())
			}
		}
		writeJSON(w, 200, out)
	case "GET /_fake/options":
		o := a.CurrentOptions()
		writeJSON(w, 200, optionsToJSON(o))
	case "POST /_fake/options":
		o := optionsToJSON(a.CurrentOptions())
		if err := json.NewDecoder(io.LimitReader(req.Body, 1<<20)).Decode(&o); err != nil {
			bad("options: " + err.Error())
			return
		}
		opts := o.Options
		if err := opts.CacheOptions.Check(); err != nil {
			bad("options: " + err.Error())
			return
		}
		opts.EventDelay = fromMS(o.EventDelayMS)
		if opts.Faults != nil {
			opts.Faults.MaxDelay = fromMS(o.FaultMaxDelayMS)
		}
		a.SetOptions(opts)
		writeJSON(w, 200, optionsToJSON(a.CurrentOptions()))
	case "POST /_fake/batches/process", "POST /_fake/batches/expire":
		a.controlBatch(w, req)
	default:
		if a.serveCacheControl(w, req) {
			return
		}
		writeError(w, 404, &APIError{Type: "not_found_error", Message: "unknown control endpoint " + route +
			"; have GET /_fake/health, POST /_fake/reset, POST /_fake/script, GET /_fake/requests, GET|POST /_fake/options" +
			", GET|POST /_fake/clock, GET /_fake/cache, POST /_fake/cache/reset, POST /_fake/batches/process|expire"}, "")
	}
}

func optionsToJSON(o Options) optionsJSON {
	j := optionsJSON{Options: o, EventDelayMS: ms(o.EventDelay)}
	if o.Faults != nil {
		f := *o.Faults
		j.Faults = &f
		j.FaultMaxDelayMS = ms(f.MaxDelay)
	}
	return j
}
