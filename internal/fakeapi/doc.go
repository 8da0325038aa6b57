// Package fakeapi is a test double of Anthropic's Messages API for ctxproxy's
// end-to-end tests, SDK compat tests, benchmarks, soak test and demo.
//
// # Serving
//
//	api := fakeapi.New(fakeapi.WithTextChunks(4))
//	srv := httptest.NewServer(api) // *API is an http.Handler
//
// Routes (the query string is ignored, so /v1/messages?beta=true works):
//   - POST /v1/messages: validated (below), then answered with the next
//     scripted Reply, as JSON or, with "stream": true, as SSE with the real
//     event sequence (message_start, ping, per block content_block_start /
//     deltas / content_block_stop, message_delta, message_stop). Every event
//     is flushed. Text and thinking arrive in several deltas, thinking ends
//     with a signature_delta, tool_use input in several input_json_delta
//     pieces that form JSON only when joined.
//   - POST /v1/messages/count_tokens: same validation (max_tokens optional),
//     answers {"input_tokens":N,"context_management":{"original_input_tokens":M}}
//     (context_management null when the request had none).
//   - Message Batches: POST /v1/messages/batches validates every params with
//     the /v1/messages rules and holds the batch in_progress; GET (list),
//     GET …/{id}, POST …/{id}/cancel (canceling until processed), DELETE
//     …/{id} (once ended) and GET …/{id}/results (JSON lines once ended,
//     content-type application/binary) answer as the API does. A batch runs
//     only when a test says: ProcessBatch(id, n) answers n (or all) of its
//     requests like /v1/messages calls without a stream (succeeded, with
//     usage.service_tier "batch", or errored for a scripted error) and ends it
//     when none is left, a canceling batch ending at once with the rest
//     canceled; ExpireBatch(id) expires the rest. results_url points at the
//     host the batch was created through.
//   - GET /v1/models and GET /v1/models/{id}: the model table (below).
//   - any other /v1/ path: {"type":"fake_passthrough","method",...}.
//     All are recorded.
//   - /_fake/...: control endpoints (below).
//
// Every reply carries a request-id: req_fake_... header; errors use the API's
// shape {"type":"error","error":{"type","message"[,"details"]},"request_id"}.
// Every request records the credential it carried (Request.Credential:
// x-api-key, else the Bearer token). With Options.EchoHeaders ("echo_headers"
// in /_fake/options) the fake behaves like a careless upstream: every reply
// repeats the request's headers as X-Fake-Echo-* headers, every error quotes
// them in its message, and other /v1/ routes list them in their body.
//
// # Validation (400 invalid_request_error unless noted)
//
//   - x-api-key or Authorization: Bearer present (else 401
//     authentication_error) and anthropic-version present; both skipped with
//     WithoutAuthCheck.
//   - anthropic-beta: every header line, split on ",", trimmed. A name is
//     accepted when it looks like a beta (^[a-z0-9-]+-(\d{4}-\d{2}-\d{2}|\d{8})$) and
//     is not denied (DefaultDenyBetas plus Options.DenyBetas); otherwise
//     "Unsupported beta header: <name>". Pattern rather than a list, so the
//     betas real clients send (Claude Code's claude-code-20250219,
//     oauth-2025-04-20, interleaved-thinking-2025-05-14, ...) pass without
//     the fake chasing every new name, while malformed names still fail.
//   - body is a JSON object (≤ 32 MiB, else 413 request_too_large; a gzip, br
//     or zstd content-encoding is decoded first); model string; max_tokens
//     integer ≥ 1 (not for count_tokens); stream boolean; thinking enabled
//     (budget_tokens ≥ 1024 and < max_tokens) | adaptive | disabled.
//   - messages non-empty; roles alternate starting with user, where
//     {"role":"system"} entries of text (as Claude Code sends after its first
//     user turn) stand outside the alternation but not between a tool_use and
//     its tool_result; content
//     non-empty except a final assistant turn; every tool_use of an assistant
//     turn answered by a tool_result with its id in the very next user turn,
//     the results placed before any other block; no tool_result without its
//     tool_use; thinking blocks carry thinking and signature.
//   - tools: custom tools need a name and an input_schema object;
//     {"type":"memory_20250818","name":"memory"} (name must be memory); other
//     typed (server) tools need a name; names unique.
//   - context_management needs the context-management-2025-06-27 beta; edits
//     of types clear_tool_uses_20250919, clear_thinking_20251015,
//     compact_20260112 only, with exactly the fields and shapes of the API reference's context-editing section
//     (unknown fields rejected); each type at most once; clear_thinking first
//     when several; clear_thinking only with thinking enabled or adaptive.
//   - thread needs the message-threads-2026-08-12 beta.
//   - the December 2026 fields (december.go): thinking between_tools (type
//     only) and, on enabled and adaptive, block_binding
//     {prefix_mismatch_behavior: error|drop_block} and display;
//     output_config.effort low|medium|high|xhigh|max;
//     output_config.task_budget {type: tokens, total ≥ 1, remaining ≤ total}
//     with the task-budgets-2026-03-13 beta; speed standard|fast;
//     billing_policy {type: billing_policy, bill_to: self|user_profile} and
//     the anthropic-user-profile-id header (user_profile_required,
//     user_profile_not_found, and the profile's billing error from
//     Options.UserProfiles: 402/403).
//   - the model table, for a model it knows (by id or alias; any other model
//     is taken as it comes): a retired model is 404; max_tokens at most the
//     model's; thinking types, effort levels, edit strategies, on-demand
//     compaction and speed fast (Model.FastMode) only where it has them.
//
// # Models (models.go, models_default.go)
//
// GET /v1/models lists the table newest first: limit 1-1000 (default 20),
// after_id / before_id, lifecycle (active|deprecated|retired, up to 3,
// lifecycle=… or lifecycle[]=…; default active and deprecated), answering
// {"data","has_more","first_id","last_id"}. GET /v1/models/{id} answers one
// model by id or alias (404 not_found_error otherwise). capabilities has
// every key; capabilities.compaction and allowed_fallback_models come only
// with an anthropic-beta header (Options.ModelBetaFieldsAlways: always). The
// table is DefaultModels unless Options.Models (WithModels, SetModels,
// {"models":[...]} in /_fake/options) replaces it.
//
// # Thinking block binding (binding.go)
//
// Always on, for every thinking and redacted_thinking block the fake
// writes: a block is bound to the messages before it, the model, the
// organization (credential) and the end user; a request whose blocks do not
// match is refused (400) or has them dropped, per
// thinking.block_binding.prefix_mismatch_behavior, and with the
// thinking-binding-controls-2026-08-01 beta the reply lists what happened in
// input_transformations (Request.InputTransformations records it always).
// binding.go says exactly what is compared.
//
// # Error codes (errcodes.go)
//
// ErrorCodeReply(code), {"error_code":code} in a scripted reply, or
// Options.KeyErrors (per credential) answer the codes of the December API
// with their status, error.type, details.error_code and headers (retry-after
// for ramp_limit_exceeded and storage_not_ready; x-should-retry: false on the
// spend limits with Options.SpendLimitsNoRetry). An undecodable body gets
// request_body_encoding_invalid / _unsupported / 413
// request_body_too_large_after_decoding.
//
// # max_tokens per model call (iterations.go)
//
// A reply holding server tool results (…_tool_result blocks) is one model
// call per result: each call's estimated output is at most max_tokens (the
// compaction call's too), usage.iterations lists one message entry per call
// and the top-level usage is their sum, so output_tokens can exceed
// max_tokens as the API's can.
//
// # Threads
//
// {"type":"create"} stores the conversation (system, tools, messages and the
// assistant reply) under the reply's id. {"type":"continue",
// "previous_message_id":ID} prepends the stored messages to the request's
// (tools and system inherited when omitted) and validates the whole. An
// unknown id is 404 not_found_error with details.error_code
// "thread_not_found" (as the Go SDK's error codes say); a reply continued
// before is 400 "thread_already_continued"; a continue racing another from
// the same id is 400 "thread_continue_in_flight". State is stored before the
// reply's first byte and dropped again when the reply is cut or ends in an
// error event (the previous reply then stays continuable). The most recent
// 10000 threads are kept.
//
// # Compaction (the compaction reference)
//
// compact_20260112 (beta compact-2026-01-12; trigger input_tokens ≥ 50000,
// default 150000) compacts when the input estimate after the other edits
// reaches the trigger: the reply begins with a compaction block
// {"type":"compaction","content":"<summary>…</summary>","encrypted_content":…}
// and usage.iterations is [compaction, message] (top-level usage is the
// message iteration only); with pause_after_compaction the block comes
// alone with stop_reason "compaction". With the edit every reply has
// usage.iterations. Streamed, the block is a content_block_start without
// the summary and one compaction_delta with the whole content. A request
// ignores every block before its last compaction block (estimate and
// edits). The on-demand form (top-level compaction {"type":"summarize"},
// beta compact-2026-09-04, never with context_management) answers only a
// signed block (signature, tool_changes) with stop_reason "compaction" and
// top-level usage 0; a signed block must come back first
// (compaction_block_misplaced) and unchanged (compaction_signature_invalid).
// count_tokens never compacts. Switches for what is unverified (Options):
// CompactionBlockNeedsEdit refuses a replayed unsigned block without the
// compact edit; ThreadsRefuse ("context_management", "thinking") answers a
// threaded request carrying them 400 thread_unsupported_request with
// details.unsupported. A Reply's RawUsage serves a usage object as scripted
// (iterations, cache_creation, server_tool_use, service_tier).
//
// # Context editing
//
// The fake applies the edits itself on a byte estimate: the prompt is
// system + tools + messages, Tokens(n) = ceil(n/4). clear_thinking drops the
// thinking/redacted_thinking blocks of all but the last keep assistant turns
// (default per model: all for Opus 4.5+, Sonnet 4.6+ and 5.x, else 1).
// clear_tool_uses (trigger default 100000 input tokens, fires when the
// estimate is over the value, or when there are more tool uses than the
// value) clears every tool use not in exclude_tools except the keep (default
// 3) most recent ones, each freeing its tool_result content (minus
// ClearedPlaceholder) and, with clear_tool_inputs, its input; not applied if
// it frees fewer than clear_at_least tokens. applied_edits lists only edits
// that cleared something ({"applied_edits":[]} when none did, null when the
// request had no context_management); usage.input_tokens is the estimate
// after the edits.
//
// # Prompt cache and cache diagnostics (the prompt cache reference)
//
// Off by default (Options.Cache, "cache" in /_fake/options): replies keep
// the numbers and shape they always had. cache_control (top-level and on
// blocks) and diagnostics are validated either way: shape {"type":
// "ephemeral","ttl"?:"5m"|"1h"}, none on thinking, redacted_thinking or
// empty text blocks, at most 4 (nested ones and the automatic one
// counted), no 1h after a 5m in the order tools, system, messages, the
// automatic one not clashing with a marker of another TTL on its block;
// diagnostics {"previous_message_id": string|null}; count_tokens refuses
// diagnostics.
//
// With "cache":"on" every POST /v1/messages is looked up after its edits
// are applied, on the prompt the model sees (blocks before the last
// compaction block dropped; earlier thinking stripped on models that keep
// only the last turn's; hidden clear_at system messages left out). The
// prompt is flattened into positions, tools → system → messages (a run of
// tool_use or tool_result blocks is one), each keyed by a hash chained from
// (credential, model): one organization never reads another's entries.
// Parameters mix in between the levels (speed, server tools and citations
// before system; tool_choice, thinking, effort, images before messages).
// Each breakpoint (explicit, or the top-level one on the last cacheable
// block) searches back Lookback (20) positions for a live entry; the
// highest hit A is read; every breakpoint after A whose prefix reaches the
// model's minimum (512-4096 by model, the spec's table) writes an entry of
// its TTL. usage: cache_read_input_tokens = T(A), cache_creation split into
// ephemeral_1h (to the last 1h breakpoint) and ephemeral_5m (to the last
// breakpoint), input_tokens after the last breakpoint; their sum is always
// count_tokens' input_tokens, the one estimate (cache_control bytes count
// after the last breakpoint, so a moved marker changes no prefix). A read
// refreshes the entries along the prefix. Streamed, message_start carries
// this usage (with cache_creation) and diagnostics; message_delta repeats
// the three counts without cache_creation. With compact_20260112 each
// usage.iterations entry has its own cache fields (the compaction
// iteration on the prompt before, the message iteration after it).
//
// Diagnostics: a request with a diagnostics object leaves a fingerprint
// under its reply's id (per credential, FingerprintTTL 1h); with
// previous_message_id the reply says the earliest divergence from that
// request: null, or {"cache_miss_reason":{"type":model_changed|
// tools_changed|system_changed|messages_changed,
// "cache_missed_input_tokens":N}} or {"type":unavailable} (another
// prompt-affecting parameter: tool_choice, thinking, context_management,
// output_config, output_format, betas) or previous_message_not_found. A
// request without diagnostics gets "diagnostics": null.
//
// Time is the fake's own clock: a fixed instant that moves only with
// AdvanceClock or POST /_fake/clock (WithClock sets its base, e.g.
// time.Now). CacheEntries and GET /_fake/cache list the live entries
// (credential, model, breakpoint path, tokens, TTL, expiry); Reset and
// POST /_fake/cache/reset empty the cache and the fingerprints.
//
// Switches for what the spec leaves unverified (CacheOptions, same names in
// JSON; every zero value is the default): lookback 20,
// tool_runs_one_position on, min_tokens {model prefix: N} /
// min_tokens_default 1024, auto_in_ttl_order on, refresh_scope chain|hit,
// refresh_ttl entry|breakpoint, ttl_in_key off, speed_level system|none,
// thinking_level messages|tools, context_management_in_key off,
// betas_in_key none|fast_mode|all, strip_prior_thinking by_model|never,
// clear_at_hides on, diagnostics_view request|prompt (prompt: a
// server-side clearing shows as messages_changed), diagnostics_pending
// never|always|streams (the pending {"cache_miss_reason":null}),
// fingerprint_ttl "1h", diagnostics_horizon 0 (off), diagnostics_absent
// null|omit, count_tokens_diagnostics reject|ignore.
//
// # Scripting
//
// Replies come from the Enqueue FIFO, else the SetResponder function, else
// the default (one text block "ok"). Script(turns...) is a responder picking
// turn N when the conversation holds N assistant turns, so one fake serves
// many concurrent agents deterministically. Block builders: Text, Thinking,
// RedactedThinking, ToolUse, Memory, MemoryView, MemoryCreate,
// MemoryStrReplace, MemoryInsert, MemoryDelete, MemoryRename; a tool_use
// with id "" gets a unique toolu_fake_... id. Faults per Reply: Status/Error
// (+Header, e.g. retry-after), Delay, EventDelay, CutAfter, Drop,
// ErrorEvent/ErrorAfter, Encoding. Random faults: WithFaults(Faults{Rate,
// Seed, Kinds}). Requests returns copies of what was seen, with the
// thread-resolved conversation and the Outcome.
//
// # Control endpoints (JSON)
//
//	POST /_fake/script   [Reply...] or {"reset":bool,"replies":[Reply...],"turns":[Reply...]}
//	                     replies are enqueued; turns become a Script responder.
//	                     → {"queued":N,"turns":N,"pending":N}
//	GET  /_fake/requests ?path=/v1/messages&since=SEQ → [RequestJSON...]
//	POST /_fake/reset    → {"ok":true}
//	GET  /_fake/options, POST /_fake/options  Options as JSON (fields merge):
//	     {"text_chunks":3,"ping_every":0,"compress":false,"deny_betas":[],
//	      "record_limit":0,"no_auth_check":false,"event_delay_ms":0,
//	      "threads_refuse":["context_management"],"compaction_block_needs_edit":false,
//	      "faults":{"rate":0.1,"seed":1,"kinds":["429","cut"]},"fault_max_delay_ms":200,
//	      "models":[Model...],"model_beta_fields_always":false,
//	      "key_errors":{"sk-x":"contract_spend_limit_reached"},"spend_limits_no_retry":false,
//	      "user_profiles":{"uprof_1":""},"billing_policy_needs_beta":false,
//	      "organizations":{"sk-a":"org_1"},"end_user":"user_profile",
//	      "prefix_binding_unenforced":["claude-opus-4-8"],"binding_mismatch_refuses":false,
//	      "between_tools_refuses_clear_thinking":false,
//	      "cache":"on","lookback":20,"min_tokens":{"claude-test":1},"diagnostics_pending":"never",...}
//	     (a cache switch set to a value it does not take is refused, 400)
//	GET  /_fake/health   → {"ok":true,"pending":N}
//	GET  /_fake/clock, POST /_fake/clock {"advance":"6m"} or {"advance_ms":360000} → {"now":T}
//	GET  /_fake/cache    → {"now":T,"entries":[{"credential","model","path","tokens","ttl","written","expires_at"}...],"fingerprints":N}
//	POST /_fake/cache/reset → {"ok":true}
//	POST /_fake/batches/process {"id":ID,"requests":N}, POST /_fake/batches/expire {"id":ID}
//	                     ProcessBatch / ExpireBatch → the batch
//
// A Reply in JSON (every field optional):
//
//	{"id":"msg_1","model":"m","text":"shorthand for one text block",
//	 "content":[{"type":"text","text":"hi"},{"type":"tool_use","name":"memory","input":{...}}],
//	 "stop_reason":"end_turn","stop_sequence":"","usage":{"input_tokens":1,"output_tokens":2,
//	 "cache_creation_input_tokens":0,"cache_read_input_tokens":0},
//	 "applied_edits":[{"type":"clear_tool_uses_20250919","cleared_tool_uses":1,"cleared_input_tokens":9}],
//	 "status":429,"error":{"type":"rate_limit_error","message":"..."},"header":{"retry-after":"1"},
//	 "delay_ms":0,"event_delay_ms":0,"text_chunks":3,"cut_after":0,"drop":false,
//	 "error_event":{"type":"overloaded_error","message":"Overloaded"},"error_after":2,
//	 "encoding":"gzip","error_code":"ramp_limit_exceeded"}
package fakeapi
