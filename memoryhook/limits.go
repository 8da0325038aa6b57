package memoryhook

// Limits bound one tenant's memory. A zero or negative field means the
// default (see DefaultLimits), so a policy can leave any of them out.
type Limits struct {
	MaxFileBytes   int64 // one file's size
	MaxTenantBytes int64 // all files of the tenant together
	MaxFiles       int   // files and directories of the tenant (directories count: they cost inodes too)
	MaxViewChars   int   // characters one view returns; longer results are cut with a note
}

// DefaultLimits: 1 MiB per file, 64 MiB and 10,000 entries per tenant,
// 100,000 characters per view.
func DefaultLimits() Limits {
	return Limits{MaxFileBytes: 1 << 20, MaxTenantBytes: 64 << 20, MaxFiles: 10000, MaxViewChars: 100000}
}

// OrDefaults fills zero or negative fields from DefaultLimits.
func (l Limits) OrDefaults() Limits {
	d := DefaultLimits()
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = d.MaxFileBytes
	}
	if l.MaxTenantBytes <= 0 {
		l.MaxTenantBytes = d.MaxTenantBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = d.MaxFiles
	}
	if l.MaxViewChars <= 0 {
		l.MaxViewChars = d.MaxViewChars
	}
	return l
}

// Scope is one tenant's view of a store.
type Scope struct {
	Tenant string
	Limits Limits
	// Actor is who writes, recorded in the history (history.go); Expect
	// is an operator's precondition, nil for the model's calls.
	Actor  Actor
	Expect *Expect
	// Mounts route the model's paths to several stores (scopes.go);
	// none: Tenant serves all of /memories. Gate checks a model's writes
	// (gate.go); nil for operators.
	Mounts []Mount
	Gate   *Gate
	// Group names the tenant whose stores' sum GroupBytes bounds (the
	// tenant's max_total_bytes over its own store and its users' and
	// keys', tenant~…); set per mount by scopes, "" for none.
	Group      string
	GroupBytes int64
}

// InGroup reports whether store is one of group's stores: the tenant's own
// or a sub-store of it (tenant~…).
func InGroup(store, group string) bool {
	return store == group || len(store) > len(group) && store[len(group)] == '~' && store[:len(group)] == group
}

// MaxLines is the most lines a file may have (the SDKs' limit for view;
// ctxproxy also refuses writes that would exceed it).
const MaxLines = 999999

// Usage is what a tenant's memory holds: bytes of all files and the number
// of entries (files and directories, the root not counted).
type Usage struct {
	Bytes   int64
	Entries int
	// others and groupMax: the bytes the store's group (Scope.Group) holds
	// in its other stores, and the bound of the sum (0: none); set by the
	// backend's write (WithGroup), under the group's lock.
	others, groupMax int64
}

// WithGroup is u with the bytes of its group's other stores and the bound
// of the group's sum (GroupBytes), for CheckUsage and CheckChange.
func (u Usage) WithGroup(others, max int64) Usage {
	u.others, u.groupMax = others, max
	return u
}

// Own is u without its group's figures, as a store keeps it.
func (u Usage) Own() Usage { return Usage{Bytes: u.Bytes, Entries: u.Entries} }

// CheckUsage returns the limit error for a tenant that would hold u after a
// write, or nil. Backends call it inside their lock or transaction, with
// the usage the write would leave, so both stores word it identically.
func (l Limits) CheckUsage(u Usage) error {
	l = l.OrDefaults()
	if u.Bytes > l.MaxTenantBytes {
		return errorf("Memory would hold %d bytes in total; the limit is %d bytes.", u.Bytes, l.MaxTenantBytes)
	}
	if u.Entries > l.MaxFiles {
		return errorf("Memory would hold %d files and directories; the limit is %d.", u.Entries, l.MaxFiles)
	}
	if u.groupMax > 0 && u.Bytes > 0 && u.others+u.Bytes > u.groupMax {
		return errorf("The tenant's memory would hold %d bytes in total (this folder's and every user's); the limit is %d bytes.", u.others+u.Bytes, u.groupMax)
	}
	return nil
}

// CheckChange is CheckUsage for a write that takes the tenant from before
// to after, checking only what grows: a tenant over a limit (lowered since,
// or filled by other means) can still rename, shrink and delete its way
// back under it.
func (l Limits) CheckChange(before, after Usage) error {
	if after.Bytes <= before.Bytes {
		after.Bytes = 0
	}
	if after.Entries <= before.Entries {
		after.Entries = 0
	}
	return l.CheckUsage(after)
}

// CheckRead returns the error for reading a file of size bytes, or nil. A
// file can only be over the limit when it was put there by other means or
// the limit was lowered; refusing keeps a read's memory bounded (it can
// still be deleted or renamed).
func (l Limits) CheckRead(p Path, size int64) error {
	if max := l.OrDefaults().MaxFileBytes; size > max {
		return errorf("File %s is %d bytes; the limit is %d bytes.", p.Raw(), size, max)
	}
	return nil
}

// checkWrite returns the error for writing data as file p, or nil.
func (l Limits) checkWrite(p Path, data []byte) error {
	if max := l.OrDefaults().MaxFileBytes; int64(len(data)) > max {
		return errorf("File %s would be %d bytes; the limit is %d bytes.", p.Raw(), len(data), max)
	}
	if n := countLines(data); n > MaxLines {
		return errorf("File %s would have %d lines; the limit is 999,999 lines.", p.Raw(), n)
	}
	return nil
}
