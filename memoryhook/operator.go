package memoryhook

import (
	"context"
	"errors"
	"strings"
)

// Operator runs an operator's writes on one tenant's memory: the operator
// API's and the CLI's. They go through the same Backend as the model's
// calls, with Scope.Actor naming the operator and Scope.Expect carrying
// the preconditions, checked inside the write's lock or transaction.
//
// Paths here are the hosted API's: the tool's path without /memories
// ("/notes/a.md" is /memories/notes/a.md).
type Operator struct {
	St Governed
	Sc Scope // Tenant, Limits and Actor
}

// PathConflictError: a create or rename met a memory (or a directory) at
// the path or at an ancestor of it. MemoryID is "" when no single memory
// is in the way (a directory).
type PathConflictError struct {
	MemoryID string
	Path     string // API path
}

func (e *PathConflictError) Error() string {
	return "memoryhook: path conflict at " + e.Path
}

// InvalidError is a bad operator request (a path, a limit).
type InvalidError struct{ Msg string }

func (e *InvalidError) Error() string { return e.Msg }

// APIPath is the hosted API's path of a memory (rel is Path.Rel()).
func APIPath(rel string) string { return "/" + rel }

// ToolPath checks an API path and returns the tool's Path for it.
func ToolPath(api string) (Path, error) {
	if !strings.HasPrefix(api, "/") || strings.HasSuffix(api, "/") || strings.Contains(api, "//") {
		return Path{}, &InvalidError{Msg: "path must start with / and name a memory: no empty segment, no trailing /, got " + quote(api)}
	}
	p, err := ParsePath(Root + api)
	if err != nil {
		var me *Error
		if errors.As(err, &me) {
			return Path{}, &InvalidError{Msg: "invalid path: " + me.Msg}
		}
		return Path{}, err
	}
	return p, nil
}

func quote(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return "\"" + s + "\""
}

func (o Operator) scope(e *Expect) Scope {
	sc := o.Sc
	sc.Limits = sc.Limits.OrDefaults()
	sc.Expect = e
	return sc
}

// memoryAt returns the live memory at rel, if any.
func (o Operator) memoryAt(ctx context.Context, rel string) (Memory, bool, error) {
	ms, err := o.St.Memories(ctx, o.Sc.Tenant)
	if err != nil {
		return Memory{}, false, err
	}
	for _, m := range ms {
		if m.Path == rel {
			return m, true, nil
		}
	}
	return Memory{}, false, nil
}

// conflict words a create or rename onto p that the store refused.
func (o Operator) conflict(ctx context.Context, p Path, err error) error {
	var nd *NotDirError
	at := p
	switch {
	case errors.As(err, &nd):
		at = nd.Path
	case !errors.Is(err, ErrExist):
		return o.plain(err)
	}
	m, ok, lerr := o.memoryAt(ctx, at.Rel())
	if lerr != nil {
		return lerr
	}
	if !ok {
		return &PathConflictError{Path: APIPath(at.Rel())}
	}
	return &PathConflictError{MemoryID: m.ID, Path: APIPath(m.Path)}
}

// plain maps a model-facing *Error (limits) to an InvalidError.
func (o Operator) plain(err error) error {
	var me *Error
	if errors.As(err, &me) {
		return &InvalidError{Msg: me.Msg}
	}
	if errors.Is(err, ErrSymlink) {
		return &InvalidError{Msg: symlinkErr.Msg}
	}
	return err
}

// Create makes a memory at api holding content.
func (o Operator) Create(ctx context.Context, api string, content []byte) (Memory, error) {
	p, err := ToolPath(api)
	if err != nil {
		return Memory{}, err
	}
	if p.IsRoot() {
		return Memory{}, &InvalidError{Msg: "path must name a memory"}
	}
	sc := o.scope(nil)
	if err := sc.Limits.checkWrite(p, content); err != nil {
		return Memory{}, o.plain(err)
	}
	if err := o.St.Backend().Create(ctx, sc, p, content); err != nil {
		return Memory{}, o.conflict(ctx, p, err)
	}
	m, ok, err := o.memoryAt(ctx, p.Rel())
	if err == nil && !ok {
		err = ErrPrecondition // changed again at once; the caller may retry the read
	}
	return m, err
}

// Update changes a memory's content and/or path (nil: unchanged). expect,
// when not "", is the content_sha256 the memory must have now; a memory
// that already has the requested content and path succeeds regardless.
func (o Operator) Update(ctx context.Context, id string, content []byte, api *string, expect string) (Memory, error) {
	m, err := o.St.MemoryByID(ctx, o.Sc.Tenant, id)
	if err != nil {
		return Memory{}, err
	}
	from, err := ToolPath(APIPath(m.Path))
	if err != nil {
		return Memory{}, err
	}
	to := from
	if api != nil {
		if to, err = ToolPath(*api); err != nil {
			return Memory{}, err
		}
		if to.IsRoot() {
			return Memory{}, &InvalidError{Msg: "path must name a memory"}
		}
	}
	same := content == nil || SHA256Hex(content) == m.SHA256
	if same && to.Rel() == from.Rel() {
		return m, nil // nothing to change: no version, and no precondition to meet
	}
	if content != nil && !same {
		sc := o.scope(&Expect{MemoryID: id, SHA256: expect})
		if err := sc.Limits.checkWrite(from, content); err != nil {
			return Memory{}, o.plain(err)
		}
		err := o.St.Backend().Update(ctx, sc, from, func([]byte) ([]byte, error) { return content, nil })
		switch {
		case errors.Is(err, ErrNotExist), errors.Is(err, ErrNotFile):
			return Memory{}, ErrPrecondition // moved or deleted since it was read
		case err != nil:
			return Memory{}, o.plain(err)
		}
		expect = SHA256Hex(content)
	}
	if to.Rel() != from.Rel() {
		sc := o.scope(&Expect{MemoryID: id, SHA256: expect})
		err := o.St.Backend().Rename(ctx, sc, from, to)
		switch {
		case errors.Is(err, ErrNotExist):
			return Memory{}, ErrPrecondition
		case errors.Is(err, ErrPrecondition):
			return Memory{}, err
		case err != nil:
			return Memory{}, o.conflict(ctx, to, err)
		}
	}
	return o.St.MemoryByID(ctx, o.Sc.Tenant, id)
}

// Delete removes a memory; expect as in Update.
func (o Operator) Delete(ctx context.Context, id, expect string) error {
	m, err := o.St.MemoryByID(ctx, o.Sc.Tenant, id)
	if err != nil {
		return err
	}
	p, err := ToolPath(APIPath(m.Path))
	if err != nil {
		return err
	}
	err = o.St.Backend().Delete(ctx, o.scope(&Expect{MemoryID: id, SHA256: expect}), p)
	if errors.Is(err, ErrNotExist) {
		return ErrPrecondition
	}
	return o.plain(err)
}

// Restore writes version ver's content back to memory id as a new
// version: an update when the memory is live (with expect, or else the
// content it has as this call reads it, so that a concurrent write is
// never silently overwritten), a create at the version's path when it was
// deleted (the memory then has a new id).
func (o Operator) Restore(ctx context.Context, id, ver, expect string) (Memory, error) {
	v, err := o.St.Version(ctx, o.Sc.Tenant, ver, true)
	if err != nil {
		return Memory{}, err
	}
	if v.MemoryID != id {
		return Memory{}, &InvalidError{Msg: "version " + ver + " is not a version of memory " + id}
	}
	if !v.HasContent {
		return Memory{}, &InvalidError{Msg: "version " + ver + " has no content to restore (a deletion, redacted, or a file found over the limit and never read)"}
	}
	m, err := o.St.MemoryByID(ctx, o.Sc.Tenant, id)
	if errors.Is(err, ErrNotExist) {
		return o.Create(ctx, APIPath(v.Path), v.Content)
	}
	if err != nil {
		return Memory{}, err
	}
	if expect == "" {
		expect = m.SHA256
	}
	return o.Update(ctx, id, v.Content, nil, expect)
}
