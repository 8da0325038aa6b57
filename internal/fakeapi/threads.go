package fakeapi

import (
	"encoding/json"
	"sync"

	"github.com/tidwall/gjson"
)

// thread is the server-held state stored under a reply's id (the API reference's threads section).
type thread struct {
	system   json.RawMessage
	tools    json.RawMessage
	messages []json.RawMessage // the whole conversation, ending with the reply
	// continued: a later reply continued from this one (each reply can be
	// continued once, as the API's thread_already_continued says).
	continued bool
	inFlight  bool
}

// threadStore keeps the most recent max threads (oldest evicted first).
type threadStore struct {
	mu    sync.Mutex
	max   int
	byID  map[string]*thread
	order []string
}

func (s *threadStore) init(max int) {
	s.max = max
	s.byID = make(map[string]*thread)
}

func (s *threadStore) reset() {
	s.mu.Lock()
	s.byID = make(map[string]*thread)
	s.order = nil
	s.mu.Unlock()
}

func (s *threadStore) put(id string, t *thread) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byID[id]; !ok {
		s.order = append(s.order, id)
	}
	s.byID[id] = t
	for len(s.order) > s.max {
		delete(s.byID, s.order[0])
		s.order = s.order[1:]
	}
}

func (s *threadStore) remove(id string) {
	s.mu.Lock()
	delete(s.byID, id) // its order entry goes when it reaches the front
	s.mu.Unlock()
}

func threadError(status int, typ, code, msg string) *reqError {
	return &reqError{status, &APIError{Type: typ, Message: msg, Details: json.RawMessage(`{"error_code":"` + code + `"}`)}}
}

// resolveThread validates the thread field and, for a continue, claims the
// previous state (marked in flight until release).
func (a *API) resolveThread(p *parsed, th gjson.Result) *reqError {
	if !hasString(p.betas, BetaMessageThreads) {
		return badRequest("thread: requires the anthropic-beta header %q", BetaMessageThreads)
	}
	if !th.IsObject() {
		return badRequest("thread: Input should be an object")
	}
	switch th.Get("type").Str {
	case "create":
		if e := onlyFields(th, "thread", "type"); e != nil {
			return e
		}
		p.thread = "create"
		return nil
	case "continue":
		if e := onlyFields(th, "thread", "type", "previous_message_id"); e != nil {
			return e
		}
		prev := th.Get("previous_message_id")
		if prev.Type != gjson.String || prev.Str == "" {
			return badRequest("thread.continue.previous_message_id: Field required")
		}
		p.thread, p.prevID = "continue", prev.Str
	default:
		return badRequest("thread.type: Input should be 'create' or 'continue'")
	}
	s := &a.threads
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.byID[p.prevID]
	switch {
	case t == nil:
		return threadError(404, "not_found_error", "thread_not_found",
			"No thread state found for previous_message_id "+p.prevID+`; replay the full conversation with thread: {"type": "create"}`)
	case t.continued:
		return threadError(400, "invalid_request_error", "thread_already_continued",
			"The response "+p.prevID+" has already been continued; continue from the thread's most recent response id")
	case t.inFlight:
		return threadError(400, "invalid_request_error", "thread_continue_in_flight",
			"Another request is still continuing from "+p.prevID)
	}
	t.inFlight = true
	p.prev = t
	return nil
}

// releaseThread ends a continue: done marks the previous reply continued.
func (a *API) releaseThread(p *parsed, done bool) {
	if p.prev == nil {
		return
	}
	a.threads.mu.Lock()
	p.prev.inFlight = false
	if done {
		p.prev.continued = true
	}
	a.threads.mu.Unlock()
}

// storeThread keeps the conversation plus the reply under replyID.
func (a *API) storeThread(p *parsed, replyID string, reply json.RawMessage) {
	msgs := make([]json.RawMessage, 0, len(p.messages)+1)
	msgs = append(append(msgs, p.messages...), reply)
	a.threads.put(replyID, &thread{system: p.system, tools: p.tools, messages: msgs})
}

func hasString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
