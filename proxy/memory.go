package proxy

import (
	"context"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
)

// The memory calls of a round: runMemory runs them in order against the
// stores the request's scope gives them, each in its own span, and counts
// each command.

// runMemory executes calls in order and returns the tool_result blocks as a
// JSON array, ready to be the content of the next user turn, and whether a
// command wrote.
func (x *exchange) runMemory(ctx context.Context, e roundEnd) (results []byte, wrote bool) {
	out := make([]byte, 0, 256)
	out = append(out, '[')
	sc, scoped := x.scope()
	if scoped {
		x.seedTemplates(ctx)
	}
	// The memory history records who wrote: the key, and the upstream
	// request and message whose tool_use ran (as the ledger names them).
	sc.Actor = memoryhook.Actor{Type: memoryhook.ActorModel, Tenant: x.who.pol.Tenant, KeyID: x.who.keyID,
		RequestID: e.requestID, MessageID: e.id}
	for i, c := range e.calls {
		var res memoryhook.Result
		switch {
		case x.s.cfg.Memory == nil:
			res = memoryhook.Result{Command: gjson.GetBytes(c.input, "command").String(), IsError: true,
				Content: "Error: memory store unavailable: this proxy has no memory store"}
		case !scoped:
			res = memoryhook.Result{Command: gjson.GetBytes(c.input, "command").String(), IsError: true,
				Content: "Error: memory store unavailable: memory here is kept per API key, and this request has none"}
		default:
			res = x.traceMemory(ctx, c.input, func(ctx context.Context) memoryhook.Result {
				return memoryhook.Exec(ctx, x.s.cfg.Memory, sc, c.input)
			})
		}
		x.memoryCommand(res)
		wrote = wrote || res.Wrote
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"type":"tool_result","tool_use_id":`...)
		out = jsonstr.Append(out, c.id)
		out = append(out, `,"content":`...)
		out = jsonstr.Append(out, res.Content)
		if res.IsError {
			out = append(out, `,"is_error":true`...)
		}
		out = append(out, '}')
	}
	return append(out, ']'), wrote
}

// traceMemory runs one memory command inside its own span: command, result
// and the result's size; never its content or a path.
func (x *exchange) traceMemory(ctx context.Context, input []byte, run func(context.Context) memoryhook.Result) memoryhook.Result {
	t := x.s.cfg.Tracer
	if !t.Enabled() {
		return run(ctx)
	}
	ctx, sp := t.StartMemory(ctx, gjson.GetBytes(input, "command").Str)
	if x.who.pol != nil && x.who.pol.Tracing.Content {
		sp.SetMemoryInput(input)
	}
	res := run(ctx)
	sp.EndMemory(!res.IsError, len(res.Content))
	return res
}

// memoryCommand accounts one memory command. A store outage is the
// operator's to see, not only the model's: it is logged with the tenant
// and the command.
func (x *exchange) memoryCommand(res memoryhook.Result) {
	x.acct.memCmds++
	if m := x.s.cfg.Metrics; m != nil {
		m.MemoryCommand(x.who.label, res.Command, res.IsError)
	}
	if res.Refused != "" {
		// A write the scopes or the gate kept out: counted and logged, its
		// text never (it may be the secret).
		if m := x.s.cfg.Metrics; m != nil {
			m.MemoryRefusal(x.who.label, res.Refused)
		}
		x.s.log.Warn("memory write refused", zap.String("tenant", x.who.label), zap.String("key", x.who.keyID),
			zap.String("command", res.Command), zap.String("reason", res.Refused))
	}
	if res.Unavailable {
		x.s.log.Error("memory store unavailable", zap.String("tenant", x.who.label),
			zap.String("command", res.Command), zap.Error(res.Err))
	}
}

// scope is the request's memory view. Without memory.scopes and a gate
// it is today's one store: the one the policy names for the key (see
// policy.Policy.MemoryStore), under the tenant's limits. With them, the
// mounts of the policy's scopes, each store chosen by the credential's
// identity (the ctxproxy key's user, else the key id), never by one the
// client names, and the gate counting the user's writes. ok is false when
// there is no store (memory per key or user, and no key).
func (x *exchange) scope() (sc memoryhook.Scope, ok bool) {
	pol := x.who.pol
	if !pol.Scoped() {
		store, ok := pol.MemoryStore(x.who.keyID)
		return memoryhook.Scope{Tenant: store, Limits: pol.Memory.Limits}, ok
	}
	mounts, ok := pol.MemoryMounts(x.who.keyID, x.who.user)
	sc = memoryhook.Scope{Tenant: pol.Tenant, Limits: pol.Memory.Limits, Mounts: mounts}
	if g := pol.Memory.Gate; g.On() {
		sc.Gate = &memoryhook.Gate{RefuseSecrets: g.RefuseSecrets, MaxPerMinute: g.MaxWritesPerMinute,
			Rate: x.s.writeRate, Who: pol.Tenant + "/" + policy.MemoryUser(x.who.keyID, x.who.user)}
	}
	return sc, ok
}

// seedTemplates copies each scope's template into the user's (or key's)
// store the first time a request of theirs reaches memory (memoryhook.Seed
// decides from the store's history whether it is the first time; this
// process asks once per store). A failure is logged and the calls run:
// the model finds the store without its seed, not a refusal.
func (x *exchange) seedTemplates(ctx context.Context) {
	pol := x.who.pol
	if x.s.cfg.Memory == nil || len(pol.Memory.Scopes) == 0 {
		return
	}
	for i := range pol.Memory.Scopes {
		s := &pol.Memory.Scopes[i]
		if s.Template == "" {
			continue
		}
		store, ok := pol.ScopeStoreName(s, x.who.keyID, x.who.user)
		if !ok {
			continue
		}
		key := store + "\x00" + s.Template
		if _, done := x.s.seeded.Load(key); done {
			continue
		}
		n, err := memoryhook.Seed(ctx, x.s.cfg.Memory, store, pol.Memory.Limits, s.Template)
		if err != nil {
			x.s.log.Error("memory template not copied", zap.String("tenant", x.who.label),
				zap.String("scope", s.Mount), zap.Error(err))
			continue
		}
		x.s.seeded.Store(key, true)
		if n > 0 {
			x.s.log.Info("memory template copied", zap.String("tenant", x.who.label),
				zap.String("scope", s.Mount), zap.String("key", x.who.keyID), zap.Int("files", n))
		}
	}
}
