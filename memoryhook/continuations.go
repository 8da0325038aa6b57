package memoryhook

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"time"
)

// Continuations keep what the proxy owes the next request of a server-held
// thread (the API reference's threads section): the tool_results of memory calls it ran but withheld from
// the client, and the id of the reply the thread really continues from. They
// live with the memory store so that whichever replica serves the client's
// continue finds them.
type Continuations interface {
	// PutContinuation keeps data for the reply replyID of tenant for ttl.
	PutContinuation(ctx context.Context, tenant, replyID string, data []byte, ttl time.Duration) error
	// GetContinuation returns what was kept, or nil and no error when there is
	// none or it expired.
	GetContinuation(ctx context.Context, tenant, replyID string) ([]byte, error)
	// GetContinuations is GetContinuation for several reply ids of tenant in one read of the
	// store (a request may name many): what was kept for each, in order, nil where nothing is.
	GetContinuations(ctx context.Context, tenant string, replyIDs []string) ([][]byte, error)
}

// continuationDir holds the file store's continuations; it can never be a
// tenant directory (tenant names do not start with a dot).
const continuationDir = ".continuations"

// continuationName is the file name for a reply id. The id comes from a
// client (previous_message_id), so it is hashed rather than trusted as a name.
func continuationName(tenant, replyID string) (string, error) {
	if !ValidTenant(tenant) {
		return "", fmt.Errorf("continuation: invalid tenant %q", tenant)
	}
	sum := sha256.Sum256([]byte(replyID))
	return path.Join(continuationDir, tenant, hex.EncodeToString(sum[:16])), nil
}

// PutContinuation implements Continuations. The file is written atomically
// (temp file, fsync, rename) like every memory file.
func (s *FileStore) PutContinuation(ctx context.Context, tenant, replyID string, data []byte, ttl time.Duration) error {
	name, err := continuationName(tenant, replyID)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	root := s.b.root
	if err := root.MkdirAll(path.Dir(name), 0o700); err != nil {
		return fmt.Errorf("continuation: %w", err)
	}
	buf := make([]byte, 8, 8+len(data))
	binary.BigEndian.PutUint64(buf, uint64(time.Now().Add(ttl).UnixNano()))
	buf = append(buf, data...)
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := name + ".tmp-" + hex.EncodeToString(rnd[:])
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("continuation: %w", err)
	}
	_, werr := f.Write(buf)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = root.Rename(tmp, name)
	}
	if werr != nil {
		root.Remove(tmp)
		return fmt.Errorf("continuation: %w", werr)
	}
	if rnd[0] < 4 { // about one put in 64
		s.sweepContinuations(tenant)
	}
	return nil
}

// GetContinuation implements Continuations.
func (s *FileStore) GetContinuation(ctx context.Context, tenant, replyID string) ([]byte, error) {
	name, err := continuationName(tenant, replyID)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, err := s.b.root.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("continuation: %w", err)
	}
	if len(b) < 8 || time.Now().UnixNano() > int64(binary.BigEndian.Uint64(b)) {
		s.b.root.Remove(name)
		return nil, nil
	}
	return b[8:], nil
}

// GetContinuations implements Continuations: the files are local, read one by one.
func (s *FileStore) GetContinuations(ctx context.Context, tenant string, replyIDs []string) ([][]byte, error) {
	out := make([][]byte, len(replyIDs))
	for i, id := range replyIDs {
		b, err := s.GetContinuation(ctx, tenant, id)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

// sweepContinuations drops a tenant's expired continuations, so abandoned
// threads do not pile up.
func (s *FileStore) sweepContinuations(tenant string) {
	dir := path.Join(continuationDir, tenant)
	d, err := s.b.root.Open(dir)
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	now := time.Now().UnixNano()
	for _, n := range names {
		b, err := s.b.root.ReadFile(path.Join(dir, n))
		if err == nil && len(b) >= 8 && now <= int64(binary.BigEndian.Uint64(b)) {
			continue
		}
		s.b.root.Remove(path.Join(dir, n))
	}
}
