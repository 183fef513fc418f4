package segment

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/metrics"
)

// FsyncMode says when the log calls fsync.
type FsyncMode int

const (
	FsyncBatch    FsyncMode = iota // after every write syscall: nothing acknowledged is lost on power failure
	FsyncInterval                  // at most every Interval
	FsyncNever                     // only at rotation and shutdown
)

// FsyncPolicy is a parsed --fsync value.
type FsyncPolicy struct {
	Mode     FsyncMode
	Interval time.Duration
}

// ParseFsync parses "never", "batch" or "interval=DURATION".
func ParseFsync(s string) (FsyncPolicy, error) {
	switch {
	case s == "batch":
		return FsyncPolicy{Mode: FsyncBatch}, nil
	case s == "never":
		return FsyncPolicy{Mode: FsyncNever}, nil
	case strings.HasPrefix(s, "interval="):
		d, err := time.ParseDuration(strings.TrimPrefix(s, "interval="))
		if err != nil || d <= 0 {
			return FsyncPolicy{}, fmt.Errorf("fsync %q: interval must be a positive duration like interval=1s", s)
		}
		return FsyncPolicy{Mode: FsyncInterval, Interval: d}, nil
	}
	return FsyncPolicy{}, fmt.Errorf("fsync %q: want never, batch or interval=DURATION", s)
}

// String renders the policy the way ParseFsync reads it.
func (p FsyncPolicy) String() string {
	switch p.Mode {
	case FsyncNever:
		return "never"
	case FsyncInterval:
		return "interval=" + p.Interval.String()
	}
	return "batch"
}

// Options configure a Log. They are plain data; Open does the I/O.
type Options struct {
	Path     string      // the active segment, e.g. aggregated_logs.jsonl
	MaxSize  int64       // rotate before a write would take the active segment past this (0 = never)
	MaxFiles int         // rotated segments kept (0 = keep all)
	Fsync    FsyncPolicy //
	Mode     fs.FileMode // mode of created segments (0 = 0640)
	// MaxDisk caps the bytes of all segments, active and rotated (0 = no
	// cap). To make room the oldest rotated segments are deleted, but only
	// those the Retainer allows; when none may go, writes fail with
	// ErrDiskCap and the pipeline writer retries (backpressure).
	MaxDisk int64
	// Retainer, if set, vetoes deleting segments it still needs.
	Retainer Retainer
	// DirectIO writes whole blocks with O_DIRECT, bypassing the page cache
	// (see directAppender). Where the filesystem refuses it, writes stay
	// buffered and DirectIO reports why.
	DirectIO bool
}

// ErrDiskCap is returned by WriteBuffers when MaxDisk is reached and no
// segment may be deleted to make room.
var ErrDiskCap = errors.New("output disk cap (--max-disk) reached and no shipped segment can be deleted")

// Log is the rotated JSON-lines output. It is used by one goroutine (the
// pipeline writer); only Size and Seq may be called concurrently.
type Log struct {
	opts    Options
	m       *metrics.Writer
	f       *os.File
	mu      sync.Mutex // guards size and seq for concurrent readers of them
	size    int64
	rotated int64 // bytes of rotated segments on disk
	seq     uint64
	dirty   bool // written since the last fsync
	// special is set when the output is not a regular file (/dev/null, a
	// pipe, a terminal): such a file cannot be fsynced, rotated or capped,
	// so those steps are skipped instead of failing every write. Benchmarks
	// use /dev/null to measure ingestion without the page cache.
	special bool
	// direct appends with O_DIRECT when Options.DirectIO is set and the
	// filesystem allows it; directErr says why it is not (or no longer) used.
	direct    *directAppender
	directErr error
	lastFsync time.Time
	iovs      [][]byte
}

// ErrClosed is returned by writes after Close.
var ErrClosed = errors.New("segment log closed")

// Open opens (creating or appending to) the active segment.
func Open(o Options, m *metrics.Writer) (*Log, error) {
	if o.Path == "" {
		return nil, errors.New("segment: empty output path")
	}
	if o.Mode == 0 {
		o.Mode = 0o640
	}
	if m == nil {
		m = metrics.NewWriter(metrics.MainOutput)
	}
	seq, err := ActiveSeq(o.Path)
	if err != nil {
		return nil, err
	}
	l := &Log{opts: o, m: m, seq: seq, lastFsync: time.Now()}
	if err := l.repairTornTail(); err != nil {
		return nil, err
	}
	if err := l.open(); err != nil {
		return nil, err
	}
	if err := l.measureRotated(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Log) open() error {
	if dir := filepath.Dir(l.opts.Path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create output directory: %w", err)
		}
	}
	f, err := os.OpenFile(l.opts.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, l.opts.Mode)
	if err != nil {
		return fmt.Errorf("open output: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("stat output: %w", err)
	}
	l.f = f
	l.special = !fi.Mode().IsRegular()
	if l.opts.DirectIO && !l.special && l.directErr == nil {
		if l.direct, err = openDirect(l.opts.Path, fi.Size(), l.m.Memory()); err != nil {
			l.directErr = err
		}
	}
	l.mu.Lock()
	l.size = fi.Size()
	l.mu.Unlock()
	l.m.OutputBytes.Set(float64(fi.Size()))
	return nil
}

// DirectIO reports whether writes bypass the page cache, and if they were
// asked to but do not, why.
func (l *Log) DirectIO() (bool, error) { return l.direct != nil, l.directErr }

// closeFiles closes the active segment's file descriptors.
func (l *Log) closeFiles() error {
	if l.direct != nil {
		l.direct.close()
		l.direct = nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Regular reports whether the output is a regular file (not /dev/null, a
// pipe or a terminal), the only kind that can be read back and forwarded.
func (l *Log) Regular() bool { return !l.special }

// Path is the active segment's path.
func (l *Log) Path() string { return l.opts.Path }

// Size is the active segment's size in bytes.
func (l *Log) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size
}

// Seq is the active segment's sequence number.
func (l *Log) Seq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// WriteBuffers appends bufs with as few writev(2) calls as the kernel allows
// (one, normally) and applies the fsync policy. Each buffer must hold whole
// lines. It rotates first if the write would pass MaxSize.
func (l *Log) WriteBuffers(bufs [][]byte) (int64, error) {
	if l.f == nil {
		return 0, ErrClosed
	}
	var n int64
	for _, b := range bufs {
		n += int64(len(b))
	}
	if n == 0 {
		return 0, nil
	}
	if !l.special {
		if l.opts.MaxSize > 0 && l.Size() > 0 && l.Size()+n > l.opts.MaxSize {
			if err := l.Rotate(); err != nil {
				return 0, err
			}
		}
		if err := l.makeRoom(n); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	before := l.Size()
	written, err := l.write(bufs, n)
	l.m.WriteSeconds.Observe(time.Since(start).Seconds())
	if err != nil && !l.special {
		// Only whole records are appended: a write that failed midway
		// (disk full) is cut back to its last complete line, so the file
		// never ends torn and a retry starts at a record boundary.
		written = l.cutToLine(bufs, before, written)
	}
	l.mu.Lock()
	l.size = before + written
	size := l.size
	l.mu.Unlock()
	l.m.OutputBytes.Set(float64(size))
	if written > 0 {
		l.dirty = true
	}
	if err != nil {
		l.m.WriteErrors.Inc()
		return written, fmt.Errorf("write %s: %w", l.opts.Path, err)
	}
	switch l.opts.Fsync.Mode {
	case FsyncBatch:
		return written, l.Sync()
	case FsyncInterval:
		if time.Since(l.lastFsync) >= l.opts.Fsync.Interval {
			return written, l.Sync()
		}
	}
	return written, nil
}

// write appends bufs (n bytes) directly or buffered. A failed direct write
// falls back to buffered for the bytes not yet written and for good.
func (l *Log) write(bufs [][]byte, n int64) (int64, error) {
	if l.direct == nil {
		return writevAll(int(l.f.Fd()), bufs, &l.iovs)
	}
	written, err := l.direct.append(bufs, n, l.f)
	var de *directError
	if !errors.As(err, &de) {
		return written, err
	}
	l.directErr = err
	l.direct.close()
	l.direct = nil
	more, err := writeAll(l.f, de.rest)
	return written + int64(more), err
}

// cutToLine truncates the file to before plus the whole lines among the
// first written bytes of bufs and returns how many bytes that keeps. The
// direct appender's idea of the file's last block is rebuilt from the file.
func (l *Log) cutToLine(bufs [][]byte, before, written int64) int64 {
	keep, seen := int64(0), int64(0)
	for _, b := range bufs {
		if seen >= written {
			break
		}
		part := b[:min(int64(len(b)), written-seen)]
		if i := bytes.LastIndexByte(part, '\n'); i >= 0 {
			keep = seen + int64(i) + 1
		}
		seen += int64(len(part))
	}
	if keep == written {
		return written
	}
	if err := l.f.Truncate(before + keep); err != nil {
		// Could not cut (the write's bytes stay): report them as written,
		// so a retry appends after them instead of repeating them.
		return written
	}
	if l.direct != nil {
		l.direct.close()
		l.direct = nil
		if d, err := openDirect(l.opts.Path, before+keep, l.m.Memory()); err == nil {
			l.direct = d
		} else {
			l.directErr = err
		}
	}
	return keep
}

// Staged is the bytes of the O_DIRECT staging buffer (pipeline.Stager):
// it grows to the largest write and is kept.
func (l *Log) Staged() int64 {
	if l.direct == nil {
		return 0
	}
	return int64(l.direct.held)
}

// Unstage gives up a staging buffer grown past its minimum.
func (l *Log) Unstage() {
	if l.direct != nil {
		l.direct.unstage()
	}
}

// Tick lets an interval policy fsync data that has been idle for a while.
func (l *Log) Tick() error {
	if l.opts.Fsync.Mode == FsyncInterval && l.dirty && time.Since(l.lastFsync) >= l.opts.Fsync.Interval {
		return l.Sync()
	}
	return nil
}

// Sync fsyncs the active segment if anything was written since the last one.
func (l *Log) Sync() error {
	if l.f == nil || !l.dirty {
		return nil
	}
	if l.special {
		l.dirty = false
		return nil
	}
	start := time.Now()
	err := unix.Fdatasync(int(l.f.Fd()))
	l.m.FsyncSeconds.Observe(time.Since(start).Seconds())
	l.lastFsync = time.Now()
	if err != nil {
		return fmt.Errorf("fsync %s: %w", l.opts.Path, err)
	}
	l.dirty = false
	return nil
}

// Rotate closes the active segment, renames it to its numbered name, opens
// a new active segment and applies retention.
//
// The rename goes only if the path still names our file. An external
// logrotate may have moved it away meanwhile (with or without creating a
// new file there): then it has already left the active name, nothing is
// renamed, and a fresh active file is opened at the path, as after SIGHUP.
// So a rename racing ours is neither an error nor a stall, and another
// program's new file is never taken for our segment.
func (l *Log) Rotate() error {
	if err := l.Sync(); err != nil {
		return err
	}
	var ours unix.Stat_t
	haveID := unix.Fstat(int(l.f.Fd()), &ours) == nil
	if err := l.closeFiles(); err != nil {
		return fmt.Errorf("close %s: %w", l.opts.Path, err)
	}
	seq := l.Seq()
	target := RotatedName(l.opts.Path, seq)
	moved, err := renameIfOurs(l.opts.Path, target, ours, haveID)
	if err != nil {
		// Keep writing to the same file rather than stop: better one big
		// segment than lost records.
		if oerr := l.open(); oerr != nil {
			return errors.Join(fmt.Errorf("rotate: %w", err), oerr)
		}
		return fmt.Errorf("rotate %s: %w", l.opts.Path, err)
	}
	if moved {
		l.m.Reopens.Inc()
		return l.open()
	}
	syncDir(filepath.Dir(l.opts.Path))
	l.mu.Lock()
	l.seq = seq + 1
	l.mu.Unlock()
	l.m.Rotations.Inc()
	if fi, err := os.Stat(target); err == nil {
		l.rotated += fi.Size()
	}
	if err := l.open(); err != nil {
		return err
	}
	return l.enforceRetention()
}

// renameIfOurs renames path to target if path is still the file ours
// describes. moved reports that it is not (moved away by someone else, or
// replaced): nothing was renamed. A rename racing ours that leaves another
// file at target is undone.
func renameIfOurs(path, target string, ours unix.Stat_t, haveID bool) (moved bool, err error) {
	same := func(st *unix.Stat_t) bool { return !haveID || (st.Dev == ours.Dev && st.Ino == ours.Ino) }
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); errors.Is(err, unix.ENOENT) || (err == nil && !same(&st)) {
		return true, nil
	}
	if err := os.Rename(path, target); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return true, nil // moved away between the check and the rename
		}
		return false, err
	}
	if err := unix.Lstat(target, &st); err == nil && !same(&st) {
		// Ours left and another file took the path between the check and
		// the rename: give that file its name back.
		_ = unix.Renameat2(unix.AT_FDCWD, target, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE)
		return true, nil
	}
	return false, nil
}

// measureRotated sums the sizes of the rotated segments on disk.
func (l *Log) measureRotated() error {
	seqs, err := ListRotated(l.opts.Path)
	if err != nil {
		return err
	}
	l.rotated = 0
	for _, s := range seqs {
		if fi, err := os.Stat(RotatedName(l.opts.Path, s)); err == nil {
			l.rotated += fi.Size()
		}
	}
	l.m.DiskBytes.Set(float64(l.rotated + l.Size()))
	return nil
}

// makeRoom deletes the oldest deletable rotated segments until n more bytes
// fit under MaxDisk, or returns ErrDiskCap.
func (l *Log) makeRoom(n int64) error {
	if l.opts.MaxDisk <= 0 {
		return nil
	}
	defer func() { l.m.DiskBytes.Set(float64(l.rotated + l.Size())) }()
	for l.rotated+l.Size()+n > l.opts.MaxDisk {
		seqs, err := ListRotated(l.opts.Path)
		if err != nil {
			return err
		}
		if len(seqs) == 0 || (l.opts.Retainer != nil && !l.opts.Retainer.MayDelete(seqs[0])) {
			l.m.DiskCapWaits.Inc()
			return ErrDiskCap
		}
		if err := l.removeRotated(seqs[0]); err != nil {
			return err
		}
	}
	return nil
}

func (l *Log) removeRotated(seq uint64) error {
	name := RotatedName(l.opts.Path, seq)
	fi, err := os.Stat(name)
	if err == nil {
		err = os.Remove(name)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete segment: %w", err)
	}
	if fi != nil && err == nil {
		l.rotated -= fi.Size()
	}
	return nil
}

// repairTornTail cuts a partial last line off the active segment: a crash
// (SIGKILL mid-writev, power loss) can leave one, and a line that was never
// completed was never accepted as written. Without the cut, the next line
// written would be glued onto the fragment.
func (l *Log) repairTornTail() error {
	f, err := os.OpenFile(l.opts.Path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open output: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return err
	}
	size := fi.Size()
	buf := make([]byte, 64<<10)
	for end := size; end > 0; {
		start := max(end-int64(len(buf)), 0)
		chunk := buf[:end-start]
		if _, err := f.ReadAt(chunk, start); err != nil {
			return fmt.Errorf("read output tail: %w", err)
		}
		if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
			keep := start + int64(i) + 1
			if keep == size {
				return nil
			}
			return f.Truncate(keep)
		}
		end = start
	}
	return f.Truncate(0)
}

func (l *Log) enforceRetention() error {
	if l.opts.MaxFiles <= 0 {
		return nil
	}
	seqs, err := ListRotated(l.opts.Path)
	if err != nil {
		return err
	}
	for len(seqs) > l.opts.MaxFiles {
		s := seqs[0]
		if l.opts.Retainer != nil && !l.opts.Retainer.MayDelete(s) {
			break // never delete what a forwarder has not shipped
		}
		if err := l.removeRotated(s); err != nil {
			return fmt.Errorf("retention: %w", err)
		}
		seqs = seqs[1:]
	}
	return nil
}

// Reopen closes and reopens the active segment by path (SIGHUP), so an
// external logrotate that moved the file away gets a fresh one.
func (l *Log) Reopen() error {
	if l.f != nil {
		if err := l.Sync(); err != nil {
			return err
		}
		if err := l.closeFiles(); err != nil {
			return fmt.Errorf("close %s: %w", l.opts.Path, err)
		}
	}
	l.m.Reopens.Inc()
	return l.open()
}

// Reconfigure applies new options between two writes (a reload): path,
// MaxSize, MaxFiles, MaxDisk, Fsync and DirectIO; Mode and Retainer stay.
// The active segment is synced, closed and opened again under the new
// options, so it also does what Reopen does. A new path is opened as Open
// would (its rotated segments counted, a torn tail cut); if that fails the
// log goes back to the old options and file and returns the error.
func (l *Log) Reconfigure(o Options) error {
	if o.Path == "" {
		return errors.New("segment: empty output path")
	}
	o.Mode, o.Retainer = l.opts.Mode, l.opts.Retainer
	old, oldSeq := l.opts, l.Seq()
	if l.f != nil {
		if err := l.Sync(); err != nil {
			return err
		}
		if err := l.closeFiles(); err != nil {
			return fmt.Errorf("close %s: %w", l.opts.Path, err)
		}
	}
	apply := func(o Options) error {
		l.opts, l.directErr = o, nil
		if o.Path != old.Path || l.f == nil {
			if err := os.MkdirAll(filepath.Dir(o.Path), 0o755); err != nil {
				return fmt.Errorf("create output directory: %w", err)
			}
			seq, err := ActiveSeq(o.Path)
			if err != nil {
				return err
			}
			l.mu.Lock()
			l.seq = seq
			l.mu.Unlock()
			if err := l.repairTornTail(); err != nil {
				return err
			}
		}
		if err := l.open(); err != nil {
			return err
		}
		return l.measureRotated()
	}
	err := apply(o)
	if err != nil {
		if l.f != nil {
			l.closeFiles()
		}
		l.mu.Lock()
		l.seq = oldSeq
		l.mu.Unlock()
		if rerr := apply(old); rerr != nil {
			return fmt.Errorf("%w; and reopening %s failed: %w", err, old.Path, rerr)
		}
		return err
	}
	l.m.Reopens.Inc()
	return l.enforceRetention()
}

// Close fsyncs and closes the log. Further writes return ErrClosed.
func (l *Log) Close() error {
	if l.f == nil {
		return nil
	}
	l.dirty = true // always fsync at shutdown, whatever the policy
	err := l.Sync()
	if cerr := l.closeFiles(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", l.opts.Path, cerr)
	}
	return err
}

// writevAll writes every byte of bufs, looping over short writes. scratch is
// reused between calls so the hot path does not allocate.
func writevAll(fd int, bufs [][]byte, scratch *[][]byte) (int64, error) {
	*scratch = append((*scratch)[:0], bufs...)
	iovs := *scratch
	defer clear(*scratch) // do not pin batch buffers between calls
	var total int64
	for len(iovs) > 0 {
		// IOV_MAX is 1024 on Linux.
		chunk := iovs
		if len(chunk) > 1024 {
			chunk = chunk[:1024]
		}
		n, err := unix.Writev(fd, chunk)
		if n > 0 {
			total += int64(n)
		}
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return total, err
		}
		for n > 0 && len(iovs) > 0 {
			if n >= len(iovs[0]) {
				n -= len(iovs[0])
				iovs = iovs[1:]
			} else {
				iovs[0] = iovs[0][n:]
				n = 0
			}
		}
		for len(iovs) > 0 && len(iovs[0]) == 0 {
			iovs = iovs[1:]
		}
	}
	return total, nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
