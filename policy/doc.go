// Package policy loads per-tenant context-management policies from a folder of YAML files, finds
// the tenant of a request by the sha256 of its API key, and rewrites Messages API requests to apply
// the tenant's policy (the API reference's headers, context-editing and threads sections).
//
// # Files
//
// Every *.yaml and *.yml file in the folder is one tenant, except prices.yaml (the price table of
// package tokens) and names starting with a dot (editors' swap and lock files). Examples that must
// not load are named *.yaml.example. default.yaml is tenant "default" with no keys. Omitted keys
// take these defaults: context_management.mode default, no edits, memory.mode off,
// memory.max_iterations 10, memory.limits 1 MiB / 64 MiB / 10000 files / 100000 view chars,
// upstream.retries 0 (200ms base, 5s max delay). A block left null (everything under it
// commented out) counts as omitted. Load errors are LoadErrors, each "file:line: problem".
//
// # Shadow candidates
//
// A shadow block names candidate policies the policy lab measures (package shadow): sample
// (0 < sample <= 1), max_per_minute (default 60) and candidates, each a name and a
// context_management in the tenant's own schema. A candidate's Policy is the tenant's with that
// context_management, so its Rewrite is the request as the candidate would have written it.
//
// # Reloads
//
// A Set is immutable; Store swaps whole Sets atomically, so a request never sees half a reload, and
// a folder that fails to load leaves the last good Set in force.
//
// # Rewrite rules and the decisions behind them
//
//   - enforce: the tenant's edits replace every edit the client sent (unknown types included).
//     default: the client's edits stand when it sent a non-empty list, else the tenant's are
//     written. off: context_management is not read or touched at all.
//   - Not off: clear_thinking_20251015 edits move to the front, the rest keep their order, unknown
//     edit types stay byte for byte. Without thinking on (thinking.type enabled or adaptive) the
//     tenant's clear_thinking is not written and a client's is dropped, since the API rejects it. If
//     that leaves no edits, context_management is removed when it held nothing else, else its edits
//     become []. With memory on, "memory" is appended to every clear_tool_uses edit's exclude_tools.
//   - Memory proxy or inject: {"type":"memory_20250818","name":"memory"} is appended to tools unless
//     the client declared it; a client tool named memory of another type is a 400. A thread
//     continue request without tools gets no tools array (it would replace the thread's tools).
//   - count_tokens gets exactly the same edits and tool, so its count matches the messages call.
//   - The beta context-management-2025-06-27 is merged when the outgoing body has
//     context_management (also in off mode when the client sent one: the API needs it and it is
//     harmless) or the memory tool with memory on.
//   - Refused with 400 invalid_request_error: invalid JSON (the message gives line, column and
//     byte offset), invalid UTF-8, nesting deeper than 10000, a body that is not an object, a
//     duplicated top-level key (the API might read the other copy), and wrong types in the fields
//     the rules touch. Inside messages, system and tools, which hold nearly all of a long
//     transcript, only what the proxy relies on is checked: where each value ends (strings end at
//     an unescaped quote), balanced brackets and the nesting bound. A bad escape, a raw control
//     character or invalid UTF-8 in their strings is left to the API, which validates every
//     request in full: checking it here would cost a second full pass over every large body.
//
// Every byte the rules do not own is kept: the body is checked and its top-level members found
// in one pass, the new values are computed with gjson on those members and spliced in (no sjson
// pass over the whole body; sjson only edits single small edit objects). The proxy sends the
// result as pieces that alias the body (RewriteParts); Rewrite builds it as one new buffer.
package policy
