package memoryhook

import (
	"context"
	"errors"
)

// Store runs the six memory commands for one tenant scope. Successful
// commands return the tool_result text; failures return an *Error (shown to
// the model) or another error (the store is unavailable). Two
// implementations: FileStore and the PostgreSQL store; both are
// built with NewStore over a Backend, so they share every result string.
type Store interface {
	View(ctx context.Context, sc Scope, p Path, viewRange []int) (string, error)
	Create(ctx context.Context, sc Scope, p Path, text string) (string, error)
	StrReplace(ctx context.Context, sc Scope, p Path, oldStr, newStr string) (string, error)
	Insert(ctx context.Context, sc Scope, p Path, line int, text string) (string, error)
	Delete(ctx context.Context, sc Scope, p Path) (string, error)
	Rename(ctx context.Context, sc Scope, from, to Path) (string, error)
	Ready(ctx context.Context) error
}

// Backend is the storage under a Store: bytes and directories of one tenant,
// no wording. Directories are real entries (made by Create and Rename for
// missing parents, left behind when their last file goes), as in a file
// system. Every method gets a valid Path and sc with Limits filled in, and
// must confine itself to sc.Tenant.
//
// Errors: the sentinels ErrNotExist, ErrExist, ErrNotFile, ErrSymlink and
// *NotDirError where the method says so, *Error from Limits.CheckChange or
// Limits.CheckRead or from the edit function, unchanged; anything else
// means unavailable (wrap it with Unavailable to give the model a reason).
// A path whose ancestor is a file does not exist (ErrNotExist), except
// where NotDirError is named.
type Backend interface {
	// Stat reports p (Rel is empty).
	Stat(ctx context.Context, sc Scope, p Path) (Entry, error)
	// ReadFile returns the content of regular file p; ErrNotFile if p is a
	// directory; Limits.CheckRead's error if it is too large to read.
	ReadFile(ctx context.Context, sc Scope, p Path) ([]byte, error)
	// List returns the entries below directory p down to depth levels (1 =
	// its children) in any order; ErrNotFile if p is a file. Symlinks and
	// other special files are left out; subtrees of hidden directories and
	// node_modules may be (the caller filters them).
	List(ctx context.Context, sc Scope, p Path, depth int) ([]Entry, error)
	// Create makes p a file holding data, making missing parents. Checks,
	// in order: ErrSymlink, *NotDirError (an ancestor is a file), ErrExist
	// (p is a file or directory), then Limits.CheckChange on the usage before and after
	// the write (the file and each new directory one entry). Atomic and
	// exclusive: a racing Create of p finds ErrExist.
	Create(ctx context.Context, sc Scope, p Path, data []byte) error
	// Update replaces the content of regular file p by edit(old), holding p
	// against every other change from the read to the write (mutex or row
	// lock): concurrent Updates never lose one. ErrNotExist, ErrNotFile,
	// ErrSymlink, CheckRead; an edit error is returned as is and nothing is
	// written; then Limits.CheckChange on the usage before and after the write.
	Update(ctx context.Context, sc Scope, p Path, edit func(old []byte) ([]byte, error)) error
	// Delete removes p, a directory with everything below it. ErrSymlink
	// (on the way to p or p itself), ErrNotExist.
	Delete(ctx context.Context, sc Scope, p Path) error
	// Rename moves from (file or directory) to to, making missing parents
	// of to. Checks, in order: ErrSymlink (on either path), ErrExist (to
	// exists), ErrNotExist (from), *NotDirError (an ancestor of to is a
	// file), CheckMove with the Extent of from's tree when from is a
	// directory and Grows(from, to) (measured in time linear in the tree),
	// Limits.CheckChange (new parents are entries). The caller has refused
	// the root and a to inside from.
	Rename(ctx context.Context, sc Scope, from, to Path) error
	// Ready reports whether the storage can serve commands now.
	Ready(ctx context.Context) error
}

// NewStore builds the Store that runs the commands over b.
func NewStore(b Backend) Store { return &commands{b: b} }

type commands struct{ b Backend }

var errInvalidPath = errors.New("memoryhook: path not made by ParsePath")

func (c *commands) scope(sc Scope, ps ...Path) (Scope, error) {
	for _, p := range ps {
		if !p.Valid() {
			return sc, errInvalidPath
		}
	}
	sc.Limits = sc.Limits.OrDefaults()
	return sc, nil
}

// symlinkErr is the SDKs' sentence; it names no path. hardLinkErr is
// ctxproxy's, in the same words.
var (
	symlinkErr  = &Error{Msg: "Path would escape /memories directory via symlink"}
	hardLinkErr = &Error{Msg: "Path would escape /memories directory via hard link"}
)

// common maps the sentinels every command words alike.
func common(err error) error {
	var nd *NotDirError
	switch {
	case errors.Is(err, ErrSymlink):
		return symlinkErr
	case errors.Is(err, ErrHardLink):
		return hardLinkErr
	case errors.As(err, &nd):
		return errorf("The path %s is not a directory.", nd.Path.String())
	}
	return err
}

func (c *commands) View(ctx context.Context, sc Scope, p Path, viewRange []int) (string, error) {
	sc, err := c.scope(sc, p)
	if err != nil {
		return "", err
	}
	if len(sc.Mounts) > 0 {
		return c.routedView(ctx, sc, p, viewRange)
	}
	missing := func(err error) error {
		if errors.Is(err, ErrNotExist) {
			return errorf("The path %s does not exist. Please provide a valid path.", p.Raw())
		}
		return common(err)
	}
	// A path can turn from file to directory between Stat and ReadFile;
	// look again once rather than answer with a wrong error.
	for try := 0; ; try++ {
		e, err := c.b.Stat(ctx, sc, p)
		if err != nil {
			return "", missing(err)
		}
		if e.Dir {
			entries, err := c.b.List(ctx, sc, p, 2)
			if errors.Is(err, ErrNotFile) && try == 0 {
				continue
			}
			if err != nil {
				return "", missing(err)
			}
			return FormatListing(p, e.Size, entries, sc.Limits.MaxViewChars), nil
		}
		data, err := c.b.ReadFile(ctx, sc, p)
		if errors.Is(err, ErrNotFile) && try == 0 {
			continue
		}
		if err != nil {
			return "", missing(err)
		}
		return FormatFile(p, data, viewRange, sc.Limits.MaxViewChars)
	}
}

func (c *commands) Create(ctx context.Context, sc Scope, p Path, text string) (string, error) {
	sc, err := c.scope(sc, p)
	if err != nil {
		return "", err
	}
	if len(sc.Mounts) > 0 {
		return c.routedCreate(ctx, sc, p, text)
	}
	exists := errorf("File %s already exists", p.Raw())
	if p.IsRoot() {
		return "", exists
	}
	data := []byte(text)
	if err := sc.Limits.checkWrite(p, data); err != nil {
		return "", err
	}
	if err := sc.Gate.admit(ctx, data); err != nil {
		return "", err
	}
	switch err := c.b.Create(ctx, sc, p, data); {
	case errors.Is(err, ErrExist):
		return "", exists
	case err != nil:
		return "", common(err)
	}
	return "File created successfully at: " + p.Raw(), nil
}

// update runs edit on file p with the messages str_replace and insert share.
func (c *commands) update(ctx context.Context, sc Scope, p Path, edit func([]byte) ([]byte, error)) error {
	if p.IsRoot() {
		return errorf("The path %s is not a file.", p.Raw())
	}
	err := c.b.Update(ctx, sc, p, func(old []byte) ([]byte, error) {
		out, err := edit(old)
		if err == nil {
			err = sc.Limits.checkWrite(p, out)
		}
		if err == nil {
			err = sc.Gate.spliced(old, out)
		}
		return out, err
	})
	switch {
	case errors.Is(err, ErrNotExist):
		return errorf("The path %s does not exist. Please provide a valid path.", p.Raw())
	case errors.Is(err, ErrNotFile):
		return errorf("The path %s is not a file.", p.Raw())
	}
	return common(err)
}

func (c *commands) StrReplace(ctx context.Context, sc Scope, p Path, oldStr, newStr string) (string, error) {
	sc, err := c.scope(sc, p)
	if err != nil {
		return "", err
	}
	if len(sc.Mounts) > 0 {
		return c.routedStrReplace(ctx, sc, p, oldStr, newStr)
	}
	if err := sc.Gate.admit(ctx, []byte(newStr)); err != nil {
		return "", err
	}
	var msg string
	err = c.update(ctx, sc, p, func(old []byte) ([]byte, error) {
		out, m, err := ReplaceOnce(p, old, oldStr, newStr)
		msg = m
		return out, err
	})
	if err != nil {
		return "", err
	}
	return msg, nil
}

func (c *commands) Insert(ctx context.Context, sc Scope, p Path, line int, text string) (string, error) {
	sc, err := c.scope(sc, p)
	if err != nil {
		return "", err
	}
	if len(sc.Mounts) > 0 {
		return c.routedInsert(ctx, sc, p, line, text)
	}
	if err := sc.Gate.admit(ctx, []byte(text)); err != nil {
		return "", err
	}
	err = c.update(ctx, sc, p, func(old []byte) ([]byte, error) {
		return InsertAt(p, old, line, text)
	})
	if err != nil {
		return "", err
	}
	return "The file " + p.Raw() + " has been edited.", nil
}

func (c *commands) Delete(ctx context.Context, sc Scope, p Path) (string, error) {
	sc, err := c.scope(sc, p)
	if err != nil {
		return "", err
	}
	if len(sc.Mounts) > 0 {
		return c.routedDelete(ctx, sc, p)
	}
	if p.IsRoot() {
		return "", errorf("Cannot delete the /memories directory itself")
	}
	if err := sc.Gate.admit(ctx, nil); err != nil {
		return "", err
	}
	switch err := c.b.Delete(ctx, sc, p); {
	case errors.Is(err, ErrNotExist):
		return "", errorf("The path %s does not exist", p.Raw())
	case err != nil:
		return "", common(err)
	}
	return "Successfully deleted " + p.Raw(), nil
}

func (c *commands) Rename(ctx context.Context, sc Scope, from, to Path) (string, error) {
	sc, err := c.scope(sc, from, to)
	if err != nil {
		return "", err
	}
	if len(sc.Mounts) > 0 {
		return c.routedRename(ctx, sc, from, to)
	}
	if from.IsRoot() {
		return "", errorf("Cannot rename the /memories directory itself")
	}
	if err := sc.Gate.admit(ctx, nil); err != nil {
		return "", err
	}
	exists := errorf("The destination %s already exists", to.Raw())
	if to.Within(from) && len(to.elems) > len(from.elems) {
		// The SDK checks the destination first: an existing one is named as
		// such even inside the source.
		switch _, err := c.b.Stat(ctx, sc, to); {
		case err == nil:
			return "", exists
		case !errors.Is(err, ErrNotExist):
			return "", common(err)
		}
		return "", errorf("Cannot rename %s to %s: the destination is inside the source.", from.Raw(), to.Raw())
	}
	switch err := c.b.Rename(ctx, sc, from, to); {
	case errors.Is(err, ErrExist):
		return "", exists
	case errors.Is(err, ErrNotExist):
		return "", errorf("The path %s does not exist", from.Raw())
	case err != nil:
		return "", common(err)
	}
	return "Successfully renamed " + from.Raw() + " to " + to.Raw(), nil
}

func (c *commands) Ready(ctx context.Context) error { return c.b.Ready(ctx) }
