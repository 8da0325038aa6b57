package memoryhook

import (
	"context"
	"errors"
	"strings"
)

// Scopes: with Scope.Mounts set, the model's one /memories tree is served
// by several stores. Each mount (a folder of the tree) maps to a store;
// the longest mount holding a path serves it, and the path inside that
// store is relative to the mount (/memories/team/a.md is /memories/a.md of
// the team's store). A listing merges the stores: a folder shows what its
// own store holds there and the mounts below it, each with what its store
// holds, in the memory tool's format (sizes, order, the two-level rule); a
// mount hides whatever the enclosing store keeps at the same place.
//
// A path no mount covers, a write into a read-only mount and a rename
// between two stores are refused with a sentence (renames between stores
// are refused, not copied: a move would be two writes in two stores, and
// a failure between them would leave the file in both or neither; the
// sentence tells the model to create and delete instead).

// Mount is one scope of a request's memory view.
type Mount struct {
	At       Path   // the mount, from ParsePath
	Store    string // the store's name (a tenant, or tenant~<sub>)
	ReadOnly bool   // the model may not write it
	Limits   Limits // the store's own limits
}

// Refusal is a command refused by the scopes or the gate before anything
// was written; Reason is read_only, secret or rate (the metrics' label).
type Refusal struct {
	Reason string
	Err    *Error
}

func (r *Refusal) Error() string { return r.Err.Msg }
func (r *Refusal) Unwrap() error { return r.Err }

// Refusal reasons.
const (
	RefusedReadOnly = "read_only"
	RefusedSecret   = "secret"
	RefusedRate     = "rate"
)

func readOnly(m *Mount) error {
	return &Refusal{Reason: RefusedReadOnly, Err: errorf("%s is read-only; ask an operator to change it.", m.At.String())}
}

// findMount returns the mount serving p: the longest whose folder holds p.
func findMount(ms []Mount, p Path) (*Mount, bool) {
	var best *Mount
	for i := range ms {
		if p.Within(ms[i].At) && (best == nil || len(ms[i].At.elems) > len(best.At.elems)) {
			best = &ms[i]
		}
	}
	return best, best != nil
}

// mountsBelow lists the mounts strictly inside folder p.
func mountsBelow(ms []Mount, p Path) []*Mount {
	var out []*Mount
	for i := range ms {
		if len(ms[i].At.elems) > len(p.elems) && ms[i].At.Within(p) {
			out = append(out, &ms[i])
		}
	}
	return out
}

// rebase is p as m's store sees it: relative to the mount, raw kept for
// the sentences, String still the model's full path.
func (m *Mount) rebase(p Path) Path {
	return Path{raw: p.raw, elems: p.elems[len(m.At.elems):], mount: m.At.elems, ok: true}
}

// scope is sc for m's store: its name and limits, no routing.
func (m *Mount) scope(sc Scope) Scope {
	// The tenant's max_total_bytes bounds each store and the sum of all of them.
	sc.Group, sc.GroupBytes = sc.Tenant, sc.Limits.OrDefaults().MaxTenantBytes
	sc.Tenant, sc.Limits, sc.Mounts = m.Store, m.Limits.OrDefaults(), nil
	return sc
}

// uncovered is the sentence for a path no mount covers; it names the
// memory folders there are.
func uncovered(p Path, ms []Mount) error {
	names := make([]string, 0, len(ms))
	for i := range ms {
		names = append(names, ms[i].At.String())
	}
	return errorf("The path %s is outside every memory folder; memory here is kept in %s.", p.Raw(), strings.Join(names, ", "))
}

// mountedHere refuses changing folder p, which holds mount n.
func mountedHere(p Path, n *Mount) error {
	if n.ReadOnly {
		return readOnly(n)
	}
	return errorf("Cannot change %s: the memory folder %s is kept apart from it; change the files inside that folder instead.", p.Raw(), n.At.String())
}

func (c *commands) routedView(ctx context.Context, sc Scope, p Path, viewRange []int) (string, error) {
	m, covered := findMount(sc.Mounts, p)
	below := mountsBelow(sc.Mounts, p)
	if !covered && len(below) == 0 {
		return "", uncovered(p, sc.Mounts)
	}
	if covered && len(below) == 0 {
		return c.View(ctx, m.scope(sc), m.rebase(p), viewRange)
	}
	// A folder with mounts below it: merge.
	var entries []Entry
	seen := map[string]bool{}
	add := func(e Entry) {
		if !seen[e.Rel] {
			seen[e.Rel] = true
			entries = append(entries, e)
		}
	}
	// owns reports whether the entry rel (below p) found in src's store is
	// what the view shows there (no longer mount hides it).
	owns := func(src *Mount, rel string) bool {
		full := Path{elems: append(append([]string(nil), p.elems...), strings.Split(rel, "/")...), ok: true}
		at, _ := findMount(sc.Mounts, full)
		return at == src
	}
	dirSize := int64(DirSize)
	if covered {
		msc, rel := m.scope(sc), m.rebase(p)
		e, err := c.b.Stat(ctx, msc, rel)
		switch {
		case err == nil && !e.Dir:
			return c.View(ctx, msc, rel, viewRange) // a file where a deeper mount's folder starts: the file shows
		case err == nil:
			dirSize = e.Size
			list, err := c.b.List(ctx, msc, rel, 2)
			if err != nil {
				return "", common(err)
			}
			for _, e := range list {
				if owns(m, e.Rel) {
					add(e)
				}
			}
		case !errors.Is(err, ErrNotExist):
			return "", common(err)
		}
	}
	for _, n := range below {
		elems := n.At.elems[len(p.elems):]
		for k := 1; k <= len(elems); k++ {
			add(Entry{Rel: strings.Join(elems[:k], "/"), Dir: true, Size: DirSize})
		}
		if depth := 2 - len(elems); depth > 0 {
			list, err := c.b.List(ctx, n.scope(sc), n.rebase(n.At), depth)
			if err != nil && !errors.Is(err, ErrNotExist) {
				return "", common(err)
			}
			prefix := strings.Join(elems, "/") + "/"
			for _, e := range list {
				if e.Rel = prefix + e.Rel; owns(n, e.Rel) {
					add(e)
				}
			}
		}
	}
	return FormatListing(p, dirSize, entries, sc.Limits.OrDefaults().MaxViewChars), nil
}

// routeWrite finds the store a write of p goes to, refusing a path no
// mount covers, a read-only mount and a folder that holds another mount.
// exists is the command's sentence for p being a folder of the view.
func routeWrite(sc Scope, p Path, exists error) (*Mount, error) {
	m, covered := findMount(sc.Mounts, p)
	below := mountsBelow(sc.Mounts, p)
	switch {
	case !covered && len(below) == 0:
		return nil, uncovered(p, sc.Mounts)
	case covered && m.ReadOnly:
		return nil, readOnly(m)
	case len(below) > 0:
		return nil, exists
	}
	return m, nil
}

func (c *commands) routedCreate(ctx context.Context, sc Scope, p Path, text string) (string, error) {
	m, err := routeWrite(sc, p, errorf("File %s already exists", p.Raw()))
	if err != nil {
		return "", err
	}
	return c.Create(ctx, m.scope(sc), m.rebase(p), text)
}

func (c *commands) routedStrReplace(ctx context.Context, sc Scope, p Path, oldStr, newStr string) (string, error) {
	m, err := routeWrite(sc, p, errorf("The path %s is not a file.", p.Raw()))
	if err != nil {
		return "", err
	}
	return c.StrReplace(ctx, m.scope(sc), m.rebase(p), oldStr, newStr)
}

func (c *commands) routedInsert(ctx context.Context, sc Scope, p Path, line int, text string) (string, error) {
	m, err := routeWrite(sc, p, errorf("The path %s is not a file.", p.Raw()))
	if err != nil {
		return "", err
	}
	return c.Insert(ctx, m.scope(sc), m.rebase(p), line, text)
}

// movable finds the mount serving p, the source of a delete or rename:
// refused when no mount covers it, it is read-only, it is a mount's own
// folder (but /memories, which the store's sentence refuses) or it holds
// another mount.
func movable(sc Scope, p Path) (*Mount, error) {
	m, covered := findMount(sc.Mounts, p)
	below := mountsBelow(sc.Mounts, p)
	switch {
	case !covered && len(below) == 0:
		return nil, uncovered(p, sc.Mounts)
	case !covered:
		return nil, mountedHere(p, below[0])
	case m.ReadOnly:
		return nil, readOnly(m)
	case len(p.elems) == len(m.At.elems) && !p.IsRoot():
		return nil, errorf("Cannot change %s itself: it is a memory folder of its own; change the files inside it instead.", p.Raw())
	case len(below) > 0:
		return nil, mountedHere(p, below[0])
	}
	return m, nil
}

func (c *commands) routedDelete(ctx context.Context, sc Scope, p Path) (string, error) {
	if p.IsRoot() { // the store's own sentence, before any store is touched
		sc.Mounts = nil
		return c.Delete(ctx, sc, p)
	}
	m, err := movable(sc, p)
	if err != nil {
		return "", err
	}
	return c.Delete(ctx, m.scope(sc), m.rebase(p))
}

func (c *commands) routedRename(ctx context.Context, sc Scope, from, to Path) (string, error) {
	if from.IsRoot() {
		sc.Mounts = nil
		return c.Rename(ctx, sc, from, to)
	}
	mf, err := movable(sc, from)
	if err != nil {
		return "", err
	}
	mt, err := routeWrite(sc, to, errorf("The destination %s already exists", to.Raw()))
	if err != nil {
		return "", err
	}
	if mf.Store != mt.Store {
		return "", errorf("Cannot rename %s to %s: they are kept in different memory folders (%s, %s). Create the file at %s and delete %s instead.",
			from.Raw(), to.Raw(), mf.At.String(), mt.At.String(), to.Raw(), from.Raw())
	}
	return c.Rename(ctx, mf.scope(sc), mf.rebase(from), mt.rebase(to))
}
