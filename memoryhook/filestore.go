package memoryhook

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
)

// FileStore keeps tenant T's /memories in <dir>/T/ on the local file system.
//
// Containment rests on two things: every file system call goes through an
// os.Root opened on the tenant directory (openat-based, cannot leave it,
// whatever links say), and before using a path the store Lstats each of its
// components and refuses any symbolic link, even one planted in an allowed
// place by someone else. A link swapped in between the check and the use
// could at most point elsewhere inside the same tenant (os.Root), and file
// reads compare the opened file with the checked one.
//
// Writes are atomic (temporary file in the same directory, fsync, rename,
// fsync of the directory). All writes of one tenant are serialised by a
// per-tenant lock, which also keeps the tenant's usage (for the limits)
// exact; reads take no lock, as a rename replaces a file whole. The lock is
// per process: two processes must not share one directory (use the
// PostgreSQL store for replicas). Files are created 0600, directories 0700.
//
// A directory's size in listings is its real st_size (4096, "4K", for small
// directories on ext4).
type FileStore struct {
	Store
	b *fileBackend
}

// NewFileStore opens (creating it if missing) the store directory dir.
func NewFileStore(dir string) (*FileStore, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("memory store %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("memory store: %w", err)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("memory store: %w", err)
	}
	hist, err := newFileHistory(root)
	if err != nil {
		root.Close()
		return nil, err
	}
	b := &fileBackend{dir: abs, root: root, hist: hist, tenants: map[string]*tenantState{}}
	return &FileStore{Store: NewStore(b), b: b}, nil
}

// Dir is the store directory (absolute). Never show it to the model.
func (s *FileStore) Dir() string { return s.b.dir }

// Close releases the store directory.
func (s *FileStore) Close() error {
	s.b.hist.close()
	return s.b.root.Close()
}

// tenantName is the shape of a tenant directory: it can never be ".", "..",
// hidden or contain a separator. A store of one of a tenant's keys is the
// tenant's name, "~" and the key's (see SubStores).
var tenantName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}(~[a-z0-9][a-z0-9-]{0,62})?$`)

// ValidTenant reports whether name can be a store (a tenant, or a sub-store
// tenant~name) of the FileStore and the PostgreSQL store.
func ValidTenant(name string) bool { return tenantName.MatchString(name) }

type fileBackend struct {
	dir  string
	root *os.Root // the store directory
	hist *fileHistory

	mu      sync.Mutex
	tenants map[string]*tenantState
}

// tenantState serialises one tenant's writes and caches its usage.
type tenantState struct {
	lock  chan struct{} // a mutex that gives up when the context does
	usage Usage
	known bool // usage has been computed; false again after a failed write
}

func (b *fileBackend) state(tenant string) *tenantState {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.tenants[tenant]
	if t == nil {
		t = &tenantState{lock: make(chan struct{}, 1)}
		b.tenants[tenant] = t
	}
	return t
}

func (t *tenantState) acquire(ctx context.Context) error {
	select {
	case t.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *tenantState) release() { <-t.lock }

// open returns an os.Root on the tenant's directory, creating it if needed.
func (b *fileBackend) open(ctx context.Context, tenant string) (*os.Root, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !ValidTenant(tenant) {
		return nil, Unavailable("invalid tenant name", fmt.Errorf("tenant %q", tenant))
	}
	fi, err := b.root.Lstat(tenant)
	if errors.Is(err, fs.ErrNotExist) {
		if err := b.root.Mkdir(tenant, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		fi, err = b.root.Lstat(tenant)
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() { // a link or file planted where the tenant directory goes
		return nil, ErrSymlink
	}
	r, err := b.root.OpenRoot(tenant)
	if err != nil {
		return nil, err
	}
	if got, err := r.Stat("."); err != nil || !os.SameFile(fi, got) {
		r.Close()
		return nil, ErrSymlink
	}
	return r, nil
}

// rel is the name of p inside the tenant root.
func rel(p Path) string {
	if p.IsRoot() {
		return "."
	}
	return p.Rel()
}

// walked is what lwalk found along a path.
type walked struct {
	have   int         // leading components that exist
	leaf   fs.FileInfo // the path itself, when it exists
	notDir Path        // the first ancestor that is not a directory, if any
	isFile bool        // notDir is set
}

// lwalk Lstats each component of p from the root down, refusing links.
func lwalk(r *os.Root, p Path) (walked, error) {
	var w walked
	if p.IsRoot() {
		fi, err := r.Lstat(".")
		w.leaf = fi
		return w, err
	}
	for i := range p.elems {
		fi, err := r.Lstat(strings.Join(p.elems[:i+1], "/"))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			w.have = i
			return w, nil
		case err != nil:
			return w, err
		case fi.Mode()&fs.ModeSymlink != 0:
			return w, ErrSymlink
		case i < len(p.elems)-1 && !fi.IsDir():
			w.have, w.notDir, w.isFile = i+1, p.prefix(i+1), true
			return w, nil
		case i == len(p.elems)-1:
			w.leaf = fi
		}
	}
	w.have = len(p.elems)
	return w, nil
}

func (b *fileBackend) Stat(ctx context.Context, sc Scope, p Path) (Entry, error) {
	e, err := b.stat(ctx, sc, p)
	return e, raced(err, false)
}

func (b *fileBackend) stat(ctx context.Context, sc Scope, p Path) (Entry, error) {
	r, err := b.open(ctx, sc.Tenant)
	if err != nil {
		return Entry{}, err
	}
	defer r.Close()
	w, err := lwalk(r, p)
	switch {
	case err != nil:
		return Entry{}, err
	case w.leaf == nil:
		return Entry{}, ErrNotExist
	case w.leaf.IsDir():
		return Entry{Dir: true, Size: w.leaf.Size()}, nil
	case w.leaf.Mode().IsRegular():
		return Entry{Size: w.leaf.Size()}, nil
	}
	return Entry{}, ErrNotExist // sockets, devices, FIFOs: not memory
}

// readFile reads regular file p after lwalk, refusing anything that changed
// between the check and the open.
func readFile(r *os.Root, sc Scope, p Path) ([]byte, error) {
	w, err := lwalk(r, p)
	switch {
	case err != nil:
		return nil, err
	case w.leaf == nil:
		return nil, ErrNotExist
	case w.leaf.IsDir():
		return nil, ErrNotFile
	case !w.leaf.Mode().IsRegular():
		return nil, ErrNotExist
	}
	if links(w.leaf) > 1 {
		return nil, ErrHardLink
	}
	if err := sc.Limits.CheckRead(p, w.leaf.Size()); err != nil {
		return nil, err
	}
	// O_NONBLOCK: a FIFO swapped in after the check must not hang us.
	f, err := r.OpenFile(rel(p), os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotExist
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	switch n := links(fi); {
	case !fi.Mode().IsRegular():
	case n == 0: // deleted since lwalk
		return nil, ErrNotExist
	case n > 1: // linked since lwalk
		return nil, ErrHardLink
	}
	if !os.SameFile(fi, w.leaf) {
		if fi.Mode().IsRegular() { // replaced by an atomic write meanwhile: fine
			if err := sc.Limits.CheckRead(p, fi.Size()); err != nil {
				return nil, err
			}
		} else {
			return nil, ErrSymlink
		}
	}
	max := sc.Limits.MaxFileBytes
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, sc.Limits.CheckRead(p, int64(len(data)))
	}
	return data, nil
}

// readAtMost reads regular file name of dir when it holds at most max
// bytes: ok is false, and nothing is kept, when it is larger (size says
// how large), however large it grew since it was listed.
func readAtMost(dir *os.Root, name string, max int64) (data []byte, size int64, ok bool, err error) {
	f, size, err := openRegular(dir, name)
	if err != nil {
		return nil, 0, false, err
	}
	defer f.Close()
	if size > max {
		return nil, size, false, nil
	}
	data, err = io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, 0, false, err
	}
	if int64(len(data)) > max {
		return nil, int64(len(data)), false, nil
	}
	return data, int64(len(data)), true, nil
}

// hashFile returns the sha256 and size of regular file name of dir,
// hashed as it streams by, when its size is want; another size is
// returned with no hash, and without reading the file.
func hashFile(dir *os.Root, name string, want int64) (sha string, size int64, err error) {
	f, size, err := openRegular(dir, name)
	if err != nil || size != want {
		return "", size, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, want+1))
	if err != nil {
		return "", 0, err
	}
	if n != want {
		return "", n, nil
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// openRegular opens name of dir for reading, without following a final
// link or waiting on a FIFO; anything but a regular file is ErrNotFile.
func openRegular(dir *os.Root, name string) (*os.File, int64, error) {
	f, err := dir.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, ErrNotFile
	}
	return f, fi.Size(), nil
}

// links is a file's link count (1 where the system does not say).
func links(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

func (b *fileBackend) ReadFile(ctx context.Context, sc Scope, p Path) ([]byte, error) {
	r, err := b.open(ctx, sc.Tenant)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	data, err := readFile(r, sc, p)
	return data, raced(err, false)
}

func (b *fileBackend) List(ctx context.Context, sc Scope, p Path, depth int) ([]Entry, error) {
	out, err := b.list(ctx, sc, p, depth)
	return out, raced(err, false)
}

func (b *fileBackend) list(ctx context.Context, sc Scope, p Path, depth int) ([]Entry, error) {
	r, err := b.open(ctx, sc.Tenant)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	w, err := lwalk(r, p)
	switch {
	case err != nil:
		return nil, err
	case w.leaf == nil:
		return nil, ErrNotExist
	case !w.leaf.IsDir():
		return nil, ErrNotFile
	}
	var out []Entry
	var walk func(dir, prefix string, level int) error
	walk = func(dir, prefix string, level int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := r.Open(dir)
		if err != nil {
			return err
		}
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			return err
		}
		for _, name := range names {
			fi, err := r.Lstat(dir + "/" + name)
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed meanwhile
			}
			if err != nil {
				return err
			}
			relName := prefix + name
			switch {
			case fi.IsDir():
				out = append(out, Entry{Rel: relName, Dir: true, Size: fi.Size()})
				if level < depth && !hiddenRel(name) {
					if err := walk(dir+"/"+name, relName+"/", level+1); err != nil && !errors.Is(err, fs.ErrNotExist) {
						return err
					}
				}
			case fi.Mode().IsRegular():
				out = append(out, Entry{Rel: relName, Size: fi.Size()})
			}
		}
		return nil
	}
	if err := walk(rel(p), "", 1); errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotExist // deleted or renamed since lwalk
	} else if err != nil {
		return nil, err
	}
	return out, nil
}

// usage returns the tenant's usage, walking its directory the first time
// (or after a failed write). Call with the tenant lock held.
func (t *tenantState) current(r *os.Root) (Usage, error) {
	if t.known {
		return t.usage, nil
	}
	u, err := treeUsage(r, ".")
	if err != nil {
		return Usage{}, err
	}
	u.Entries-- // the root itself is not an entry
	t.usage, t.known = u, true
	return u, nil
}

// treeUsage counts the regular files (bytes) and directories below and
// including name (a directory or a file), without following links.
func treeUsage(r *os.Root, name string) (Usage, error) {
	fi, err := r.Lstat(name)
	if err != nil {
		return Usage{}, err
	}
	u := Usage{Entries: 1}
	switch {
	case fi.Mode().IsRegular():
		u.Bytes = fi.Size()
	case !fi.IsDir():
		u.Entries = 0
	default:
		err = walkTree(r, name, fi, func(e walkEntry) error {
			if e.Info.Mode().IsRegular() {
				u.Bytes += e.Info.Size()
				u.Entries++
			} else if e.Info.IsDir() {
				u.Entries++
			}
			return nil
		})
	}
	return u, err
}

// treeExtent measures how far directory name reaches below it.
func treeExtent(r *os.Root, name string, fi fs.FileInfo) (Extent, error) {
	var ext Extent
	err := walkTree(r, name, fi, func(e walkEntry) error {
		ext.Depth, ext.Bytes = max(ext.Depth, e.Depth), max(ext.Bytes, 1+len(e.Rel))
		return nil
	})
	return ext, err
}

// walkEntry is one entry walkTree visits.
type walkEntry struct {
	Dir   *os.Root // the directory holding it: open the entry as Name there
	Name  string
	Rel   string // its path below the walk's top, "a/b.md"
	Info  fs.FileInfo
	Depth int // 1 for the top's children
}

// walkTree calls visit for every entry below directory name (fi is its
// Lstat), parents before children. Each directory is opened once, relative
// to its parent, and each entry Lstatted relative to its directory, so the
// walk costs the same per entry at any depth (a walk by paths from the top,
// like fs.WalkDir over os.Root.FS, costs the depth per entry: quadratic in a
// deep tree). Links are never followed: a directory that is not the one
// listed when it is opened is a link swapped in (ErrSymlink).
func walkTree(r *os.Root, name string, fi fs.FileInfo, visit func(walkEntry) error) error {
	return walkDir(r, name, fi, "", 1, visit)
}

// walkDir walks directory name of parent, whose path below the top is rel.
func walkDir(parent *os.Root, name string, fi fs.FileInfo, rel string, depth int, visit func(walkEntry) error) error {
	d, err := parent.OpenRoot(name)
	if err != nil {
		return err
	}
	defer d.Close()
	if got, err := d.Stat("."); err != nil || !os.SameFile(fi, got) {
		return ErrSymlink
	}
	f, err := d.Open(".")
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, name := range names {
		fi, err := d.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile (not by a write of ours: they hold the lock)
		}
		if err != nil {
			return err
		}
		e := walkEntry{Dir: d, Name: name, Rel: name, Info: fi, Depth: depth}
		if rel != "" {
			e.Rel = rel + "/" + name
		}
		if err := visit(e); err != nil {
			return err
		}
		if fi.IsDir() {
			if err := walkDir(d, name, fi, e.Rel, depth+1, visit); err != nil {
				return err
			}
		}
	}
	return nil
}

// write runs fn holding the tenant's lock with its current usage; fn
// returns the usage after it. A failure that may have left the disk
// half-changed makes the next write recount.
func (b *fileBackend) write(ctx context.Context, sc Scope, fn func(r *os.Root, u Usage) (Usage, error)) error {
	var others int64
	grouped := sc.GroupBytes > 0 && InGroup(sc.Tenant, sc.Group)
	if grouped {
		// The group's lock, then the store's: the group's grouped writes go one at a time, so
		// the sum each checks is the sum it leaves.
		g := b.state(sc.Group + "~")
		if err := g.acquire(ctx); err != nil {
			return err
		}
		defer g.release()
		var err error
		if others, err = b.groupBytes(ctx, sc.Group, sc.Tenant); err != nil {
			return err
		}
	}
	t := b.state(sc.Tenant)
	if err := t.acquire(ctx); err != nil {
		return err
	}
	defer t.release()
	r, err := b.open(ctx, sc.Tenant)
	if err != nil {
		return err
	}
	defer r.Close()
	u, err := t.current(r)
	if err != nil {
		return raced(err, true) // a recount that met a link swapped in
	}
	if grouped {
		u = u.WithGroup(others, sc.GroupBytes)
	}
	after, err := fn(r, u)
	if err != nil {
		var me *Error
		if !errors.As(err, &me) && !errors.Is(err, ErrExist) && !errors.Is(err, ErrNotExist) &&
			!errors.Is(err, ErrNotFile) && !errors.Is(err, ErrSymlink) && !errors.Is(err, ErrHardLink) {
			t.known = false
		}
		return raced(err, true)
	}
	t.usage = after.Own()
	return nil
}

// groupBytes is what group's stores but except hold: each store's usage read under its own lock
// (a write to it that is not the group's, an operator's, goes first or after).
func (b *fileBackend) groupBytes(ctx context.Context, group, except string) (int64, error) {
	d, err := b.root.Open(".")
	if err != nil {
		return 0, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, name := range names {
		if name == except || !InGroup(name, group) || !ValidTenant(name) {
			continue
		}
		u, err := b.storeUsage(ctx, name)
		if err != nil {
			return 0, err
		}
		sum += u.Bytes
	}
	return sum, nil
}

// storeUsage is store's usage, under its lock.
func (b *fileBackend) storeUsage(ctx context.Context, store string) (Usage, error) {
	t := b.state(store)
	if err := t.acquire(ctx); err != nil {
		return Usage{}, err
	}
	defer t.release()
	r, err := b.open(ctx, store)
	if err != nil {
		return Usage{}, err
	}
	defer r.Close()
	u, err := t.current(r)
	return u, raced(err, false)
}

// raced names the errors a path changed after lwalk checked it gives: a
// link swapped in (by someone outside: the tool makes none) makes os.Root
// refuse to leave the tenant, or O_NOFOLLOW refuse the last component, or a
// directory expected a component that is no longer one. Under the write
// lock only an outsider changes the tree, so all of them are the link
// refusal; a read may also race the tenant's own writes, where a directory
// turned file means the path no longer exists.
func raced(err error, write bool) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ELOOP), escapes(err):
		return ErrSymlink
	case errors.Is(err, syscall.ENOTDIR):
		if write {
			return ErrSymlink
		}
		return ErrNotExist
	}
	return err
}

// mkdirs makes the missing ancestors of p, from w.have on.
func mkdirs(r *os.Root, p Path, have int) error {
	for i := have; i < len(p.elems)-1; i++ {
		if err := r.Mkdir(strings.Join(p.elems[:i+1], "/"), 0o700); err != nil {
			return err
		}
	}
	if have < len(p.elems)-1 {
		return syncDir(r, p.prefix(have))
	}
	return nil
}

func syncDir(r *os.Root, dir Path) error {
	d, err := r.Open(rel(dir))
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		return err
	}
	return nil
}

// writeAtomic replaces (or creates) file p with data: a temporary file in
// the same directory, fsync, rename over p, fsync of the directory. A crash
// leaves either the old or the new file, plus at worst a hidden ".tmp-*".
func writeAtomic(ctx context.Context, r *os.Root, p Path, data []byte) (err error) {
	var rnd [8]byte
	rand.Read(rnd[:])
	dir := p.Parent()
	tmp := ".tmp-" + hex.EncodeToString(rnd[:])
	if !dir.IsRoot() {
		tmp = dir.Rel() + "/" + tmp
	}
	f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			r.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = ctx.Err(); err != nil { // last moment to give up without a change
		return err
	}
	if err = r.Rename(tmp, rel(p)); err != nil {
		return err
	}
	return syncDir(r, dir)
}

func (b *fileBackend) Create(ctx context.Context, sc Scope, p Path, data []byte) error {
	return b.write(ctx, sc, func(r *os.Root, u Usage) (Usage, error) {
		before := u
		w, err := lwalk(r, p)
		switch {
		case err != nil:
			return u, err
		case w.isFile:
			return u, &NotDirError{Path: w.notDir}
		case w.have == len(p.elems):
			return u, ErrExist
		}
		u.Entries += len(p.elems) - w.have // new directories and the file
		u.Bytes += int64(len(data))
		if err := sc.Limits.CheckChange(before, u); err != nil {
			return u, err
		}
		return u, b.hist.do(ctx, r, sc, change{op: "create", p: p, new: data}, func() error {
			if err := mkdirs(r, p, w.have); err != nil {
				return err
			}
			return writeAtomic(ctx, r, p, data)
		})
	})
}

func (b *fileBackend) Update(ctx context.Context, sc Scope, p Path, edit func([]byte) ([]byte, error)) error {
	return b.write(ctx, sc, func(r *os.Root, u Usage) (Usage, error) {
		before := u
		old, err := readFile(r, sc, p)
		if err != nil {
			return u, err
		}
		data, err := edit(old)
		if err != nil {
			return u, err
		}
		u.Bytes += int64(len(data)) - int64(len(old))
		if err := sc.Limits.CheckChange(before, u); err != nil {
			return u, err
		}
		return u, b.hist.do(ctx, r, sc, change{op: "update", p: p, old: old, new: data}, func() error {
			return writeAtomic(ctx, r, p, data)
		})
	})
}

func (b *fileBackend) Delete(ctx context.Context, sc Scope, p Path) error {
	return b.write(ctx, sc, func(r *os.Root, u Usage) (Usage, error) {
		w, err := lwalk(r, p)
		switch {
		case err != nil:
			return u, err
		case w.leaf == nil:
			return u, ErrNotExist
		}
		gone, err := treeUsage(r, rel(p))
		if err != nil {
			return u, err
		}
		err = b.hist.do(ctx, r, sc, change{op: "delete", p: p}, func() error {
			if err := r.RemoveAll(rel(p)); err != nil {
				return err
			}
			return syncDir(r, p.Parent())
		})
		if err != nil {
			return u, err
		}
		u.Bytes -= gone.Bytes
		u.Entries -= gone.Entries
		return u, nil
	})
}

func (b *fileBackend) Rename(ctx context.Context, sc Scope, from, to Path) error {
	return b.write(ctx, sc, func(r *os.Root, u Usage) (Usage, error) {
		before := u
		wf, err := lwalk(r, from)
		if err != nil {
			return u, err
		}
		wt, err := lwalk(r, to)
		switch {
		case err != nil:
			return u, err
		case wt.leaf != nil:
			return u, ErrExist
		case wf.leaf == nil:
			return u, ErrNotExist
		case wt.isFile:
			return u, &NotDirError{Path: wt.notDir}
		}
		if wf.leaf.IsDir() && Grows(from, to) {
			ext, err := treeExtent(r, rel(from), wf.leaf)
			if err != nil {
				return u, err
			}
			if err := CheckMove(from, to, ext); err != nil {
				return u, err
			}
		}
		u.Entries += len(to.elems) - 1 - wt.have
		if err := sc.Limits.CheckChange(before, u); err != nil {
			return u, err
		}
		if err := mkdirs(r, to, wt.have); err != nil {
			return u, err
		}
		if err := ctx.Err(); err != nil {
			return u, err
		}
		return u, b.hist.do(ctx, r, sc, change{op: "rename", p: from, to: to}, func() error {
			if err := r.Rename(rel(from), rel(to)); err != nil {
				return err
			}
			if err := syncDir(r, to.Parent()); err != nil {
				return err
			}
			return syncDir(r, from.Parent())
		})
	})
}

func (b *fileBackend) Ready(ctx context.Context) error {
	if _, err := b.root.Stat("."); err != nil {
		return Unavailable("store directory not accessible", err)
	}
	return nil
}

// escapes reports os.Root's refusal to leave its directory (its error value
// is unexported; TestSymlinkSwapRaceGivesTheSymlinkSentence pins the text).
func escapes(err error) bool {
	switch e := err.(type) {
	case nil:
		return false
	case interface{ Unwrap() []error }: // errors.Join: a failed write and its failed settling
		for _, err := range e.Unwrap() {
			if escapes(err) {
				return true
			}
		}
		return false
	}
	return err.Error() == "path escapes from parent" || escapes(errors.Unwrap(err))
}
