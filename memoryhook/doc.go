// Package memoryhook runs the memory tool (memory_20250818) for ctxproxy:
// the model's view, create, str_replace, insert, delete and rename calls,
// against a guarded per-tenant store, answered with the exact strings the
// official SDK helpers return (see the API reference's memory-tool section).
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
//
// Around the commands:
//   - Scopes: a Scope with Mounts serves one /memories tree from several
//     stores (a tenant's, a team's, a user's), the longest mount deciding,
//     read-only mounts refusing writes and listings merged (scopes.go).
//   - The gate: a Gate in the Scope (memory.gate) refuses a model's write
//     that holds a secret (FindSecret names its kind, never the secret) or
//     passes the user's writes per minute (WriteRate), before anything is
//     stored; a Refusal says why (read_only, secret or rate).
//   - History: every write keeps a Version (who wrote it, Scope.Actor: the
//     model's call, an operator, the system) of a Memory whose id survives
//     renames, the hosted memory stores' shape. History is what a store with
//     versions offers, Governed a Store with history; Retention and
//     PruneSet decide which versions are pruned (the head of a live memory
//     never is).
//   - Operator writes: Operator runs an operator's writes (create, update,
//     delete, restore: the operator API's and the CLI's) through the same
//     Backend with Scope.Expect preconditions checked inside the write's
//     lock or transaction; operators' writes carry no Gate.
//   - Continuations: what the proxy owes the next request of a server-held
//     thread, kept beside the memory so any replica finds it.
//
// # Implementing a Backend (the PostgreSQL store)
//
// Results are the command layer's business; a Backend only has to keep the
// same file-system-like model the FileStore has, and storetest.Run proves
// it does:
//   - Directories are entries of their own (a row per directory): Create
//     and Rename add missing parents, deleting a file leaves its directory,
//     Delete of a directory removes everything below it, Rename of a
//     directory moves everything below it. Stat and List report a
//     directory's Size as DirSize, so listings print "4K" like the file
//     store does on ext4.
//   - The root always exists: Stat of /memories succeeds for a tenant with
//     nothing stored (an empty listing, not an error).
//   - There are no links: ErrSymlink never happens.
//   - Update is read, edit, write of one row in one transaction with the row
//     locked (SELECT … FOR UPDATE); the limits check runs in the same
//     transaction against the tenant's usage, also locked, so concurrent
//     writes can never together pass a limit. Usage counts file bytes and
//     entries (files and directories, the root not counted).
//   - The order of checks in Create and Rename is part of the contract (it
//     decides which error the model sees); follow the Backend docs. Rename
//     must refuse, with CheckMove, a move that would carry a path below it
//     past MaxPathDepth or MaxPathBytes, before it changes anything.
//   - Nothing may cost more than linear time in what it touches, whatever
//     the depth of the tree: no walk that resolves each path from the root.
//   - Database errors become Unavailable("database unavailable", err) (or a
//     better model-safe reason); Exec shows only the reason.
//   - Every query is scoped by sc.Tenant; paths are Path.Rel() ("" = root).
//   - Continuations (thread state) are kept beside the memory, so
//     a shared store implements that interface too.
package memoryhook
