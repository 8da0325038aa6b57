// Package memoryhook runs the memory tool (memory_20250818) for ctxproxy:
// the model's view, create, str_replace, insert, delete and rename calls,
// against a guarded per-tenant store, answered with the exact strings the
// official SDK helpers return (see shared/spec/api.md §8).
//
// Layers, outermost first:
//   - Exec: one tool_use input (JSON) to one tool_result (Result).
//   - ParsePath: the guard; every path is hostile until it returns a Path.
//   - Store: the six commands for a Scope (tenant + limits). NewStore builds
//     one over a Backend and holds all wording and command semantics
//     (FormatListing, FormatFile, ReplaceOnce, InsertAt, Limits checks).
//   - Backend: storage only (stat, read, list, locked update, create,
//     delete, rename). FileStore is the file system one; the PostgreSQL
//     store implements Backend too, and memoryhook/storetest checks that
//     both answer character for character alike.
package memoryhook
