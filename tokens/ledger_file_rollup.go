package tokens

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// fileRollupWidth is the file ledger's rollup bucket: a UTC day, not an hour, so that a month
// of a busy file ledger's rollup (100 tenants, 1,000 users) stays in tens of MiB.
const fileRollupWidth = 24 * time.Hour

// fileRollupVersion is the format of the rollup file; a file of another is rebuilt.
const fileRollupVersion = 1

// fileRollupSaveEvery is how many lines the ledger appends between two saves of its rollup.
const fileRollupSaveEvery = 200_000

// fileRollupLinesMax bounds the rollup's cache of rows by line (byLine): past it, the cache
// starts again empty. A day's tenants, models, keys and users of a busy ledger fit. (A
// variable for the tests.)
var fileRollupLinesMax = 1 << 14

// fileRollup is the file ledger's rollup: the lines of the bytes [0, offset) of the ledger
// summed per UTC day, tenant and model, key id and user. It lives in memory and beside the
// ledger (PATH.rollup), where it is only a cache of the JSON lines, which stay the truth: a
// rollup file that is missing, unreadable, of other sums or of another ledger (its offset
// past the end, or the bytes before its offset changed) is rebuilt from the ledger, and one
// behind the ledger (a process killed after a write, before the save; lines written by
// another process) is brought up to date from the lines after its offset.
type fileRollup struct {
	path string // the rollup file; "" when the ledger is not a regular file: no rollup

	mu     sync.Mutex
	loaded bool // rows (and byLine's sums) and offset are the ledger's [0, offset)
	tried  bool // a load from the rollup file was tried
	offset int64
	rows   map[rollupKey]*Totals
	// byLine is the rows of a line's day, tenant, model, key id and user, one per dimension,
	// and the sums of its lines not in them yet (flush adds them), so that a line costs one
	// map lookup and one sum, not three of each: on the append path, hashing the rows' keys
	// was two thirds of the rollup's cost. Its rows are rows' (setRows).
	byLine map[lineKey]*lineRows
	// synced: offset is the end of the file as this process last wrote it, so the lines of
	// its next write follow: added without asking the file where they landed (a syscall as
	// dear as the write). last is the last line written; a report finds it where it should
	// be, or another process wrote in between and the rollup is rebuilt.
	synced  bool
	last    []byte
	unsaved int // lines summed since the rollup file was written
}

// rollupFile is the rollup file's content (encoding/gob).
type rollupFile struct {
	Version int
	Sums    []string // the columns of rollupSums, in order
	Offset  int64
	Mark    [sha256.Size]byte // of the ledger's bytes before Offset (markLen of them)
	Rows    []rollupFileRow
}

type rollupFileRow struct {
	Day                int64 // Unix seconds of the bucket's start
	Tenant, Dim, Value string
	Sums               []int64
}

// markLen is how many of the ledger's bytes before the offset the rollup file's mark covers.
const markLen = 4096

func sumNames() []string {
	out := make([]string, len(rollupSums))
	for i, f := range rollupSums {
		out[i] = f.col
	}
	return out
}

// mark is the sha256 of the ledger's bytes [offset-markLen, offset).
func mark(r io.ReaderAt, offset int64) ([sha256.Size]byte, error) {
	from := max(0, offset-markLen)
	b := make([]byte, offset-from)
	if _, err := r.ReadAt(b, from); err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(b), nil
}

// load reads the rollup file when it is of this ledger as it is now (r, of size size), else
// leaves the rollup unloaded. Called with mu held.
func (fr *fileRollup) load(r io.ReaderAt, size int64) {
	fr.tried = true
	f, err := os.Open(fr.path)
	if err != nil {
		return
	}
	defer f.Close()
	var rf rollupFile
	if err := gob.NewDecoder(bufio.NewReader(f)).Decode(&rf); err != nil {
		return
	}
	if rf.Version != fileRollupVersion || !slices.Equal(rf.Sums, sumNames()) || rf.Offset > size {
		return
	}
	if m, err := mark(r, rf.Offset); err != nil || m != rf.Mark {
		return
	}
	rows := make(map[rollupKey]*Totals, len(rf.Rows))
	for _, row := range rf.Rows {
		t := new(Totals)
		for i, f := range rollupSums {
			*f.of(t) = row.Sums[i]
		}
		d := dimIndex(row.Dim)
		if d < 0 {
			return // not a dimension of these sums: rebuilt
		}
		rows[rollupKey{bucket: row.Day, dim: uint8(d), tenant: row.Tenant, value: row.Value}] = t
	}
	fr.setRows(rows)
	fr.offset, fr.loaded = rf.Offset, true
}

// lineRows are the rollup rows of one lineKey, one per dimension, and the sums of its lines
// added since the last flush, in none of them yet.
type lineRows struct {
	rows [len(rollupDims)]*Totals
	sums Totals
}

// setRows makes rows the rollup's, with no line added to them but theirs: the sums not
// flushed into the rows before them go with them.
func (fr *fileRollup) setRows(rows map[rollupKey]*Totals) {
	fr.rows, fr.byLine = rows, nil
}

// add adds c to the rollup (lineCounts: shadow lines and count_tokens without savings add
// nothing); its rows have it after the next flush.
func (fr *fileRollup) add(c *Call) {
	if !lineCounts(c) {
		return
	}
	k := newLineKey(c, fileRollupWidth)
	lr := fr.byLine[k]
	if lr == nil {
		if len(fr.byLine) >= fileRollupLinesMax {
			fr.flush()
			fr.byLine = nil
		}
		if fr.byLine == nil {
			fr.byLine = make(map[lineKey]*lineRows)
		}
		lr = new(lineRows)
		for d := range lr.rows {
			rk := k.rollupRow(d)
			if lr.rows[d] = fr.rows[rk]; lr.rows[d] == nil {
				lr.rows[d] = new(Totals)
				fr.rows[rk] = lr.rows[d]
			}
		}
		fr.byLine[k] = lr
	}
	lr.sums.addLine(c)
}

// flush adds the sums of the lines added since the last flush to their rows: called before
// the rows are read (a report, a save).
func (fr *fileRollup) flush() {
	for _, lr := range fr.byLine {
		if lr.sums == (Totals{}) {
			continue
		}
		for _, r := range lr.rows {
			r.addSums(&lr.sums)
		}
		lr.sums = Totals{}
	}
}

// save writes the rollup file (a new file renamed over the old). Called with mu held.
func (fr *fileRollup) save(r io.ReaderAt) error {
	fr.flush()
	rf := rollupFile{Version: fileRollupVersion, Sums: sumNames(), Offset: fr.offset, Rows: make([]rollupFileRow, 0, len(fr.rows))}
	var err error
	if rf.Mark, err = mark(r, fr.offset); err != nil {
		return fmt.Errorf("save ledger rollup %s: %w", fr.path, err)
	}
	for k, t := range fr.rows {
		sums := make([]int64, len(rollupSums))
		for i, f := range rollupSums {
			sums[i] = *f.of(t)
		}
		rf.Rows = append(rf.Rows, rollupFileRow{Day: k.bucket, Tenant: k.tenant, Dim: rollupDims[k.dim], Value: k.value, Sums: sums})
	}
	tmp, err := os.CreateTemp(filepath.Dir(fr.path), ".rollup-*")
	if err != nil {
		return fmt.Errorf("save ledger rollup %s: %w", fr.path, err)
	}
	defer os.Remove(tmp.Name()) //nolint:errcheck // gone after the rename
	w := bufio.NewWriterSize(tmp, 256<<10)
	if err := gob.NewEncoder(w).Encode(&rf); err != nil {
		tmp.Close()
		return fmt.Errorf("save ledger rollup %s: %w", fr.path, err)
	}
	if err := errors.Join(w.Flush(), tmp.Chmod(0o640), tmp.Close()); err != nil { // as the ledger
		return fmt.Errorf("save ledger rollup %s: %w", fr.path, err)
	}
	if err := os.Rename(tmp.Name(), fr.path); err != nil {
		return fmt.Errorf("save ledger rollup %s: %w", fr.path, err)
	}
	fr.unsaved = 0
	return nil
}

// appended adds the lines cs, which the ledger has just written as buf (last its last line),
// when the rollup is synced with the file; otherwise it stays behind and the next report
// reads them from the file. r reads the ledger. The first time, the rollup is loaded from its
// file, never rebuilt here: that is a report's work, not the writer's.
func (fr *fileRollup) appended(r *os.File, buf, last []byte, cs []Call) {
	if fr.path == "" {
		return
	}
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if !fr.tried {
		fr.tried = true
		st, err := r.Stat()
		if err != nil {
			return
		}
		if before := st.Size() - int64(len(buf)); before == 0 { // a new ledger: nothing to rebuild
			fr.setRows(map[rollupKey]*Totals{})
			fr.loaded, fr.synced = true, true
		} else {
			fr.load(r, before)
			fr.synced = fr.loaded && fr.offset == before
		}
	}
	if !fr.synced {
		return
	}
	for i := range cs {
		fr.add(&cs[i])
	}
	fr.offset += int64(len(buf))
	fr.last = append(fr.last[:0], last...)
	if fr.unsaved += len(cs); fr.unsaved >= fileRollupSaveEvery {
		fr.save(r) //nolint:errcheck // a cache: the next report reads what it lacks from the file
	}
}

// failed is told of a failed write: where the next one lands is no longer known.
func (fr *fileRollup) failed() {
	fr.mu.Lock()
	fr.synced = false
	fr.mu.Unlock()
}

// lastInPlace reports whether the last line this process wrote ends at the offset.
func (fr *fileRollup) lastInPlace(r io.ReaderAt, size int64) bool {
	if len(fr.last) == 0 {
		return true
	}
	from := fr.offset - int64(len(fr.last))
	if from < 0 || fr.offset > size {
		return false
	}
	b := make([]byte, len(fr.last))
	_, err := r.ReadAt(b, from)
	return err == nil && bytes.Equal(b, fr.last)
}

// catchUp brings the rollup's rows up to the ledger's complete lines in [0, size): it loads
// the rollup file, or rebuilds from the start, then sums the lines after its offset. Called
// with mu held; it returns the offset it reached.
func (fr *fileRollup) catchUp(ctx context.Context, r io.ReaderAt, size int64) (int64, error) {
	if fr.path == "" {
		fr.setRows(map[rollupKey]*Totals{})
		fr.loaded = true
		return 0, nil
	}
	if !fr.tried {
		fr.load(r, size)
	}
	if fr.loaded && fr.synced && !fr.lastInPlace(r, size) {
		fr.loaded = false // another process wrote between this one's lines
	}
	if !fr.loaded || fr.offset > size {
		fr.setRows(map[rollupKey]*Totals{})
		fr.offset, fr.loaded, fr.last = 0, true, nil
	}
	if fr.offset == size {
		fr.flush()
		fr.synced = true
		return size, nil
	}
	n := 0
	end, err := scanLines(ctx, r, fr.offset, size, func(line []byte) {
		if c, err := UnmarshalCall(line); err == nil {
			fr.add(&c)
			n++
		}
	})
	if err != nil {
		// Some of the lines after the offset are summed: the next report rebuilds.
		fr.loaded, fr.synced = false, false
		return 0, err
	}
	fr.flush()
	fr.offset, fr.synced = end, end == size
	if fr.unsaved += n; fr.unsaved > 0 {
		fr.save(r) //nolint:errcheck // a cache: read again from the file next time
	}
	return end, nil
}

// scanLines calls fn with each complete line of r in [from, to) (a line without its '\n'
// is being written, or was cut short: left out) and returns the offset after the last one.
func scanLines(ctx context.Context, r io.ReaderAt, from, to int64, fn func(line []byte)) (int64, error) {
	br := bufio.NewReaderSize(io.NewSectionReader(r, from, to-from), 256<<10)
	end := from
	for n := 0; ; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull { // a line longer than the buffer
			long := append([]byte(nil), line...)
			for err == bufio.ErrBufferFull {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err == io.EOF {
			return end, nil
		}
		if err != nil {
			return 0, err
		}
		end += int64(len(line))
		if line = bytes.TrimSpace(line); len(line) > 0 {
			fn(line)
		}
	}
}

// fileRollupView is the ledger's complete lines up to offset and the rollup of them. It
// holds the rollup's lock from its catch-up until the rollup is read (addRollup comes before
// addLines), so no append moves the rollup past the lines the view reads.
type fileRollupView struct {
	fr     *fileRollup
	r      *os.File
	offset int64
	locked bool
}

// rollupView brings the rollup up to the ledger's end and reads from there.
func (l *FileLedger) rollupView(ctx context.Context) (rollupView, []time.Duration, error) {
	r, err := os.Open(l.path)
	if err != nil {
		return nil, nil, fmt.Errorf("query ledger %s: %w", l.path, err)
	}
	l.mu.Lock() // between two batches: a report sees the whole of each it sees
	st, err := r.Stat()
	l.rollup.mu.Lock()
	l.mu.Unlock()
	if err != nil {
		l.rollup.mu.Unlock()
		r.Close()
		return nil, nil, fmt.Errorf("query ledger %s: %w", l.path, err)
	}
	size := st.Size()
	if !st.Mode().IsRegular() {
		size = 0 // e.g. /dev/full: nothing to read back
	}
	offset, err := l.rollup.catchUp(ctx, r, size)
	if err != nil {
		l.rollup.mu.Unlock()
		r.Close()
		return nil, nil, fmt.Errorf("query ledger %s: %w", l.path, err)
	}
	return &fileRollupView{fr: &l.rollup, r: r, offset: offset, locked: true}, []time.Duration{fileRollupWidth}, nil
}

func (v *fileRollupView) unlock() {
	if v.locked {
		v.locked = false
		v.fr.mu.Unlock()
	}
}

func (v *fileRollupView) close(context.Context) error {
	v.unlock()
	return v.r.Close()
}

func (v *fileRollupView) addRollup(_ context.Context, b *reportBuilder, _ time.Duration, tenant string, from, to time.Time) error {
	if !v.locked {
		return errors.New("ledger rollup read after the lines")
	}
	defer v.unlock()
	dim := b.groupBy
	if dim == GroupByDay {
		dim = GroupByModel
	}
	d := dimIndex(dim)
	for k, t := range v.fr.rows {
		if int(k.dim) != d || (tenant != "" && k.tenant != tenant) ||
			(!from.IsZero() && k.bucket < from.Unix()) || (!to.IsZero() && k.bucket >= to.Unix()) {
			continue
		}
		group := groupName(k.value)
		if b.groupBy == GroupByDay {
			group = k.bucketTime().Format(time.DateOnly)
		}
		b.add(k.tenant, group, t)
	}
	return nil
}

func (v *fileRollupView) addLines(ctx context.Context, b *reportBuilder, f Filter) error {
	v.unlock()
	_, err := scanLines(ctx, v.r, 0, v.offset, func(line []byte) {
		if t, ok := lineTime(line); ok && !inPeriod(t, f) {
			return // most lines of a month are outside a period's ends: not parsed
		}
		if c, err := UnmarshalCall(line); err == nil && f.Match(&c) {
			b.addCall(&c)
		}
	})
	return err
}

// lineTime reads the time of a ledger line as AppendCall writes it ({"v":1,"time":"…").
func lineTime(line []byte) (time.Time, bool) {
	const prefix = `{"v":1,"time":"`
	if !bytes.HasPrefix(line, []byte(prefix)) {
		return time.Time{}, false
	}
	rest := line[len(prefix):]
	i := bytes.IndexByte(rest, '"')
	if i < 0 {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(rest[:i]))
	return t, err == nil
}

// inPeriod is f's time condition.
func inPeriod(t time.Time, f Filter) bool {
	return (f.Since.IsZero() || !t.Before(f.Since)) && (f.Until.IsZero() || t.Before(f.Until))
}
