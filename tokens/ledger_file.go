package tokens

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// FileLedger appends one JSON line per call to a file opened with O_APPEND; each record, or
// batch of records, is one write. After a failed or short write (a full disk) the next record starts on a fresh line, so
// one lost record never corrupts the next; Query skips lines that do not parse.
type FileLedger struct {
	path string

	mu      sync.Mutex
	f       *os.File
	needNL  bool // the file may end in a partial line
	buf     []byte
	closed  bool
	skipped int // lines Query could not parse, last Query

	rf     *os.File // reads the file for the rollup; nil when it is not a regular file
	rollup fileRollup
}

// OpenFileLedger opens (creating it and its directory) the JSON-lines ledger at path.
func OpenFileLedger(path string) (*FileLedger, error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("open ledger %s: %w", path, err)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	l := &FileLedger{path: path, f: f}
	l.needNL = endsMidLine(path)
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		if l.rf, err = os.Open(path); err != nil {
			f.Close()
			return nil, fmt.Errorf("open ledger %s: %w", path, err)
		}
		l.rollup.path = path + ".rollup"
	}
	return l, nil
}

// endsMidLine reports whether the regular file at path is non-empty and does not end in '\n'.
func endsMidLine(path string) bool {
	r, err := os.Open(path)
	if err != nil {
		return false
	}
	defer r.Close()
	st, err := r.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
		return false
	}
	var b [1]byte
	if _, err := r.ReadAt(b[:], st.Size()-1); err != nil {
		return false
	}
	return b[0] != '\n'
}

// Path is the file's path.
func (l *FileLedger) Path() string { return l.path }

// Append writes c as one line.
func (l *FileLedger) Append(ctx context.Context, c Call) error {
	_, err := l.AppendBatch(ctx, []Call{c})
	return err
}

// AppendBatch writes cs as lines in one write.
func (l *FileLedger) AppendBatch(ctx context.Context, cs []Call) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("ledger append: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, errors.New("ledger append: closed")
	}
	l.buf = l.buf[:0]
	if l.needNL {
		l.buf = append(l.buf, '\n')
	}
	start, last := len(l.buf), len(l.buf)
	for i := range cs {
		last = len(l.buf)
		l.buf = AppendCall(l.buf, &cs[i])
		l.buf = append(l.buf, '\n')
	}
	n, err := l.f.Write(l.buf)
	if err != nil {
		// Some bytes may have landed: start the next record on a new line.
		l.needNL = n > 0 || l.needNL
		l.rollup.failed()
		return bytes.Count(l.buf[start:max(n, start)], []byte{'\n'}), fmt.Errorf("ledger append %s: %w", l.path, err)
	}
	l.needNL = false
	if l.rf != nil {
		l.rollup.appended(l.rf, l.buf, l.buf[last:], cs)
	}
	return len(cs), nil
}

// Query reads the file from the start and returns the records matching f, in file order.
// It reads only what the file held when Query began; a trailing partial line is ignored.
func (l *FileLedger) Query(ctx context.Context, f Filter) ([]Call, error) {
	r, err := os.Open(l.path)
	if err != nil {
		return nil, fmt.Errorf("query ledger %s: %w", l.path, err)
	}
	defer r.Close()
	st, err := r.Stat()
	if err != nil {
		return nil, fmt.Errorf("query ledger %s: %w", l.path, err)
	}
	size := st.Size()
	if !st.Mode().IsRegular() {
		size = 0 // e.g. /dev/full: nothing to read back
	}
	br := bufio.NewReaderSize(io.LimitReader(r, size), 64<<10)
	var out []Call
	skipped := 0
	for n := 0; ; n++ {
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("query ledger %s: %w", l.path, err)
			}
		}
		line, err := br.ReadBytes('\n')
		if err == io.EOF {
			break // a line without '\n' is still being written, or was cut short
		}
		if err != nil {
			return nil, fmt.Errorf("query ledger %s: %w", l.path, err)
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		c, err := UnmarshalCall(line)
		if err != nil {
			skipped++
			continue
		}
		if f.Match(&c) {
			out = append(out, c)
		}
	}
	l.mu.Lock()
	l.skipped = skipped
	l.mu.Unlock()
	return out, nil
}

// Skipped is the number of unreadable lines the last Query passed over.
func (l *FileLedger) Skipped() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.skipped
}

// Close syncs and closes the file.
func (l *FileLedger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.rf != nil {
		l.rollup.mu.Lock()
		if l.rollup.loaded && l.rollup.unsaved > 0 {
			l.rollup.save(l.rf) //nolint:errcheck // a cache: the next report reads what it lacks from the file
		}
		l.rollup.mu.Unlock()
		l.rf.Close()
	}
	serr := l.f.Sync()
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("close ledger %s: %w", l.path, err)
	}
	if serr != nil && !isNotSyncable(serr) {
		return fmt.Errorf("sync ledger %s: %w", l.path, serr)
	}
	return nil
}

// isNotSyncable is true for files fsync does not apply to (character devices such as /dev/full).
func isNotSyncable(err error) bool {
	return errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP)
}
