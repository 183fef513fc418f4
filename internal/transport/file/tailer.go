package file

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/budget"
	"github.com/ipclab/logagg/internal/bufpool"
	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/transport"
)

const (
	// roundBytes is how much of one file is read before the next active
	// file gets its turn, so one busy file cannot starve the others.
	roundBytes = 1 << 20
	// minScanGap bounds how often inotify events can trigger a rescan.
	minScanGap = 50 * time.Millisecond
	// orphanTTL is how long content that lost its inode (a file truncated
	// by copytruncate) waits for its copy to turn up, and maxOrphans how
	// many such entries are kept.
	orphanTTL  = time.Minute
	maxOrphans = 1024
	// copyGrace is how long a new file whose first bytes equal those of
	// a file still being read waits before it is read as a file of its own:
	// copytruncate copies first and truncates after, and the copy must
	// not be read from its start while the original is still intact.
	copyGrace = 2 * time.Second
	// statsEvery is how often the gauges are updated.
	statsEvery = time.Second
	// shutdownWait bounds how long Run waits, after ctx ended, for the
	// records it emitted to be written, so the final checkpoint covers them.
	shutdownWait = 5 * time.Second
)

type devino struct{ dev, ino uint64 }

type fpKey struct {
	n  int
	fp uint64
}

type fileState uint8

const (
	stLive   fileState = iota // watched at a path
	stOrphan                  // content its inode no longer holds, waiting for a copy
	stGone                    // forgotten
)

// held is a record being put together from several lines: a container
// runtime's partial lines, or the lines of a multi-line record. Its
// buffer is counted against the budget for incomplete records that every
// stream connection's incomplete frame is counted against too (heldBytes).
type held struct {
	buf    []byte
	start  int64 // file offset of its first line; -1: nothing held
	end    int64 // file offset after its last line
	since  time.Time
	lines  int // lines (a container's: pieces) in buf; 0 after a forced write-out
	flags  record.Flags
	time   []byte
	stream string

	acct    *heldBytes
	counted int64 // cap(buf) as acct counts it
}

func (h *held) active() bool { return h != nil && h.start >= 0 }

func (h *held) reset() {
	h.start, h.lines, h.flags, h.stream = -1, 0, 0, ""
	h.time = h.time[:0]
	if cap(h.buf) > 4<<10 {
		// Not kept per file: it counts against the budget for incomplete
		// records while it holds none.
		h.free()
	}
	h.buf = h.buf[:0]
	h.recount()
}

// add appends p to what h holds. The buffer grows in the power-of-two
// sizes bufpool lends, the smaller one going back to the pool: a 192 KiB
// line that comes in 16 KiB pieces would otherwise leave a dozen buffers
// of garbage behind it, in every file that holds one.
func (h *held) add(p ...[]byte) {
	n := len(h.buf)
	for _, x := range p {
		n += len(x)
	}
	if n > cap(h.buf) {
		// Doubling, but not past a record's size unless this piece needs
		// it (a container's line goes over max_record by its last piece).
		nb := append(bufpool.Get(bufpool.Size(max(n, min(2*cap(h.buf), h.acct.most)))), h.buf...)
		bufpool.Put(h.buf)
		h.buf = nb
	}
	for _, x := range p {
		h.buf = append(h.buf, x...)
	}
	h.recount()
}

// free gives h's buffer back (its count too, at the next recount).
func (h *held) free() {
	bufpool.Put(h.buf)
	h.buf = nil
}

// recount counts h's buffer as it is now (appends may have grown it).
func (h *held) recount() {
	if c := int64(cap(h.buf)); c != h.counted {
		h.acct.add(c - h.counted)
		h.counted = c
	}
}

var newline = []byte{'\n'}

// heldBytes is what one tailer's held records take of the budget for
// incomplete records (transport.Deps.Partial): a thousand files each in
// the middle of a multi-line record, or of a container's long line, must
// not hold a thousand buffers of up to max_record.
type heldBytes struct {
	budget *transport.ByteBudget
	mem    *metrics.Memory
	total  int64 // this tailer's share, given back when it ends
	most   int   // max_record: the size a held buffer doubles up to
}

func (a *heldBytes) add(n int64) {
	a.budget.Add(n)
	a.mem.Add(metrics.MemPartialFrames, n)
	a.total += n
}

// file is what the input knows of one file's content.
type file struct {
	path    string // reported as agg.file: the path it had when first seen
	at      string // the path it was last seen at (where it is reopened)
	id      devino
	fp      uint64 // fingerprint of the first fpLen bytes
	fpLen   int
	fd      int // -1: closed
	state   fileState
	seen    uint64 // scan generation it was last seen in
	changed bool   // size or mtime differ from what was read: worth a look

	off       int64 // next byte to read; every byte before is framed
	emitOff   int64 // every byte before is in emitted records
	committed int64 // every byte before is written: what the checkpoint says
	hw        int64 // high-water mark of bytes read, so each is counted once
	size      int64 // last known size
	mtime     int64

	active    bool
	lastUse   time.Time
	heldSince time.Time // an unterminated last line waits since then (zero: none)
	heldLen   int64
	rotated   time.Time // when it left the glob or was deleted (zero: at a path)
	orphanAt  time.Time
	problem   string

	split   lineSplitter
	charged bool // its fileCost is taken of the budget
	format  format
	cj      [2]*held
	ml      [2]*held
	rules   [2]joinRule
}

// holding reports whether any record is being put together.
func (f *file) holding() bool {
	for _, h := range [...]*held{f.cj[0], f.cj[1], f.ml[0], f.ml[1]} {
		if h.active() {
			return true
		}
	}
	return false
}

// doneOff is the offset before which every byte is in an emitted record,
// given that the framer consumed up to end.
func (f *file) doneOff(end int64) int64 {
	for _, h := range [...]*held{f.cj[0], f.cj[1], f.ml[0], f.ml[1]} {
		if h.active() && h.start < end {
			end = h.start
		}
	}
	return end
}

// completer is told by the writers how far the records are written.
type completer struct{ written atomic.Uint64 }

// Written implements pipeline.Completer: quick, never blocks.
func (c *completer) Written(mark uint64) {
	for {
		old := c.written.Load()
		if mark <= old || c.written.CompareAndSwap(old, mark) {
			return
		}
	}
}

// update moves a file's committed offset once mark is written.
type update struct {
	seq uint64
	f   *file
	off int64
}

// tailer is one file:// input: a single goroutine that discovers,
// watches and reads every file matching the pattern (see doc.go).
type tailer struct {
	cfg  *config
	url  string
	log  *slog.Logger
	m    *metrics.Listener
	e    *sink.Emitter
	comp completer

	ckPath        string
	hadCheckpoint bool
	restored      map[devino]*ckFile
	firstScan     bool

	w *watcher

	live     map[*file]struct{}
	byID     map[devino]*file
	byPath   map[string]*file
	liveFP   map[fpKey][]*file
	orphans  []*file
	runq     []*file
	openList []*file
	holding  map[*file]struct{}
	copyWait map[string]time.Time
	problems map[string]string // path → cause reported (files not known yet)

	buf   []byte
	head  []byte
	dbuf  []byte
	metas [3]*record.Meta // none, stdout, stderr

	seq, issued uint64
	updates     []update
	dirty       bool

	scanGen   uint64
	nextScan  time.Time
	lastScan  time.Time
	nextCk    time.Time
	nextStats time.Time
	savedAt   atomic.Int64 // unix ns of the last durable checkpoint
	lastMoved time.Time
	ckCh      chan []byte
	ckDone    chan struct{}

	stopped bool // the hard stop ended a hand-over

	held   heldBytes
	forced func() // counts a held record written out early for the budget

	files      *budget.Gate // the connections' share, which every file followed takes fileCost of
	filesHeld  int64        // what this tailer took of it
	filesWait  int          // files the last scan could not follow for memory
	waitLogged time.Time
	waited     func(n int) // counts files not followed for memory
}

// fileCost is what following one file costs (its state, its path twice,
// its places in the maps): 10,000 files more raised the daemon's peak by
// 8.4 MiB. It is taken of the connections' share of the memory budget
// (transport.Deps.Conns), as a connection's cost is: a glob that matches
// 100,000 files must not take the daemon past its budget.
const fileCost = 1 << 10

func newTailer(l *Listener) *tailer {
	bufSize := max(256<<10, l.cfg.maxRecord+1)
	t := &tailer{
		cfg: l.cfg, url: l.url, log: l.d.Log, m: l.d.Metrics, e: l.d.Sink.Emitter(l.d.Metrics),
		ckPath: l.ckPath, hadCheckpoint: l.hadCheckpoint, restored: map[devino]*ckFile{}, firstScan: true,
		live: map[*file]struct{}{}, byID: map[devino]*file{}, byPath: map[string]*file{}, liveFP: map[fpKey][]*file{},
		holding: map[*file]struct{}{}, copyWait: map[string]time.Time{}, problems: map[string]string{},
		buf: make([]byte, bufSize), head: make([]byte, fpBytes),
		ckCh: make(chan []byte, 1), ckDone: make(chan struct{}),
		held: heldBytes{budget: l.d.Partial, mem: l.d.Memory(), most: l.cfg.maxRecord}, forced: func() {},
	}
	if t.held.budget == nil {
		t.held.budget = transport.NewByteBudget(l.d.Opts.MaxPartialBytes)
	}
	t.files, t.waited = l.d.Conns, func(int) {}
	if r := l.d.Root; r != nil {
		c := r.MemoryLimited.WithLabelValues(metrics.LimitPartialFrame)
		t.forced = c.Inc
		w := r.MemoryLimited.WithLabelValues(metrics.LimitFiles)
		t.waited = func(n int) { w.Add(float64(n)) }
	}
	for i := range l.restored {
		c := &l.restored[i]
		if c.Orphan {
			t.addOrphan(t.fromCheckpoint(c), time.Now())
			continue
		}
		t.restored[devino{c.Dev, c.Ino}] = c
	}
	for i, s := range [...]string{"", "stdout", "stderr"} {
		m := &record.Meta{Transport: Scheme, Listener: l.url, Stream: s, NoSyslog: true}
		m.Prepare()
		t.metas[i] = m
	}
	return t
}

// newFile is a file to follow, whose cost the caller took (takeFile,
// chargeFile).
func (t *tailer) newFile(path, at string, id devino) *file {
	f := &file{path: path, at: at, id: id, fd: -1, format: t.cfg.format,
		split: lineSplitter{max: t.cfg.maxRecord}, charged: t.files != nil}
	if newJoinRule(t.cfg) != nil {
		f.rules = [2]joinRule{newJoinRule(t.cfg), newJoinRule(t.cfg)}
	}
	return f
}

// takeFile takes a new file's cost of the budget, or reports that it
// does not fit (the file then waits for the next scan).
func (t *tailer) takeFile() bool {
	if t.files == nil {
		return true
	}
	if !t.files.TryTake(fileCost) {
		t.filesWait++
		return false
	}
	t.filesHeld += fileCost
	return true
}

// chargeFile takes a file's cost whether it fits or not: a file followed
// before (the checkpoint's), or the new content of a file followed.
func (t *tailer) chargeFile() {
	if t.files != nil {
		t.files.Charge(fileCost)
		t.filesHeld += fileCost
	}
}

// release gives back what a forgotten file took: the buffers of its held
// records (written out by then) and, once, its cost of the budget.
func (t *tailer) release(f *file) {
	for _, h := range [...]*held{f.cj[0], f.cj[1], f.ml[0], f.ml[1]} {
		if h != nil {
			h.free()
			h.recount()
		}
	}
	if t.files != nil && f.charged {
		f.charged = false
		t.files.Give(fileCost)
		t.filesHeld -= fileCost
	}
}

// reportWaiting counts and reports the files the scan could not follow
// for memory (at most once a minute in the log).
func (t *tailer) reportWaiting(now time.Time) {
	n := t.filesWait
	t.filesWait = 0
	if n == 0 {
		return
	}
	t.waited(n)
	if now.Sub(t.waitLogged) >= time.Minute {
		t.waitLogged = now
		t.log.Warn("file input: files wait to be followed: the memory budget's share for connections and files is spent; raise limits.memory",
			"input", t.url, "files", n, "each", fileCost)
	}
}

func (t *tailer) fromCheckpoint(c *ckFile) *file {
	t.chargeFile()
	f := t.newFile(c.Path, c.Path, devino{c.Dev, c.Ino})
	fp, _ := parseHex(c.FP)
	f.fp, f.fpLen = fp, c.FPLen
	f.off, f.emitOff, f.committed, f.hw = c.Offset, c.Offset, c.Offset, c.Offset
	return f
}

// run is the input's loop (see doc.go); it returns when ctx ends or the
// hard stop ended a hand-over.
func (t *tailer) run(ctx context.Context) error {
	if t.cfg.watch == "inotify" {
		w, err := newWatcher()
		if err != nil {
			t.log.Warn("file input: inotify unavailable, polling instead", "err", err)
		} else {
			t.w = w
			defer w.close()
			stop := context.AfterFunc(ctx, w.interrupt)
			defer stop()
			if dir := staticDir(t.cfg.pattern); dir != "" {
				_ = w.watch(dir) // a directory that does not exist yet is found by the scans
			}
		}
	}
	go t.checkpointer()
	defer t.closeAll()
	defer func() { // the budget outlives the input (a reload)
		t.held.add(-t.held.total)
		if t.files != nil {
			t.files.Give(t.filesHeld)
		}
	}()
	now := time.Now()
	t.nextScan, t.nextCk, t.nextStats, t.lastMoved = now, now.Add(t.cfg.checkpointGap), now, now
	for ctx.Err() == nil && !t.stopped {
		now = time.Now()
		t.applyCommits()
		if t.w != nil {
			if err := t.w.poll(t.onEvent); err != nil {
				t.watchFailed(err)
			}
		}
		if !now.Before(t.nextScan) {
			first := t.firstScan
			t.scan(now)
			if first {
				// The files found and where they start, at once: from now
				// on every file the checkpoint does not know is new.
				t.nextCk, t.dirty = now, true
			}
		}
		progress := t.readRound(now)
		t.timeouts(now)
		if !now.Before(t.nextStats) {
			t.stats(now)
		}
		if !now.Before(t.nextCk) {
			t.checkpoint(now)
		}
		if progress || t.stopped {
			continue
		}
		if err := t.e.Flush(); err != nil {
			t.stopped = true
			break
		}
		t.sleep(ctx, t.wakeAt(now))
	}
	return t.shutdown()
}

// shutdown hands over what was emitted, waits (boundedly) until it is
// written, and saves the final checkpoint.
func (t *tailer) shutdown() error {
	if err := t.e.Flush(); err != nil {
		t.stopped = true
	}
	t.e.Release()
	if !t.stopped {
		deadline := time.Now().Add(shutdownWait)
		for t.comp.written.Load() < t.issued && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.applyCommits()
	close(t.ckCh)
	<-t.ckDone
	if t.dirty {
		if err := saveCheckpoint(t.ckPath, t.snapshot()); err != nil {
			t.log.Error("file input: final checkpoint", "path", t.ckPath, "err", err)
			return err
		}
	}
	return nil
}

// checkpointer saves the snapshots the loop hands it, off the loop, so an
// fsync never holds up reading. Only the newest waiting snapshot is saved.
func (t *tailer) checkpointer() {
	defer close(t.ckDone)
	failed := false
	for b := range t.ckCh {
		if err := saveCheckpoint(t.ckPath, b); err != nil {
			if !failed {
				t.log.Error("file input: checkpoint", "path", t.ckPath, "err", err)
			}
			failed = true
			continue
		}
		failed = false
		t.savedAt.Store(time.Now().UnixNano())
	}
}

func (t *tailer) checkpoint(now time.Time) {
	t.nextCk = now.Add(t.cfg.checkpointGap)
	if !t.dirty {
		return
	}
	t.dirty = false
	b := t.snapshot()
	select {
	case <-t.ckCh: // an older one not saved yet: this one replaces it
	default:
	}
	t.ckCh <- b
	t.lastMoved = now
}

func (t *tailer) snapshot() []byte {
	files := make([]ckFile, 0, len(t.live)+len(t.orphans))
	add := func(f *file, orphan bool) {
		files = append(files, ckFile{Path: f.path, Dev: f.id.dev, Ino: f.id.ino, FP: hex16(f.fp), FPLen: f.fpLen,
			Offset: f.committed, Orphan: orphan})
	}
	for f := range t.live {
		add(f, false)
	}
	for _, f := range t.orphans {
		add(f, true)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return encodeCheckpoint(files)
}

func (t *tailer) applyCommits() {
	w := t.comp.written.Load()
	i := 0
	for ; i < len(t.updates) && t.updates[i].seq <= w; i++ {
		u := t.updates[i]
		if u.off > u.f.committed {
			u.f.committed = u.off
			if u.f.state != stGone {
				t.dirty = true
			}
		}
		t.updates[i] = update{}
	}
	if i > 0 {
		n := copy(t.updates, t.updates[i:])
		t.updates = t.updates[:n]
	}
}

// mark tells the sink that f's records up to now are covered by a new
// completion, so f's checkpoint may move there once they are written.
func (t *tailer) mark(f *file) {
	off := f.doneOff(f.off)
	if off <= f.emitOff {
		return
	}
	f.emitOff = off
	next := t.seq + 1
	if t.e.Done(pipeline.Completion{To: &t.comp, Mark: next}) {
		t.seq, t.issued = next, next
		t.updates = append(t.updates, update{seq: next, f: f, off: off})
		return
	}
	if t.e.Err() != nil {
		t.stopped = true
		return
	}
	// Nothing emitted since the last hand-over: what moved f (empty lines,
	// a record held) is covered once everything handed over is written.
	t.updates = append(t.updates, update{seq: t.issued, f: f, off: off})
}

func (t *tailer) wakeAt(now time.Time) time.Time {
	at := t.nextScan
	if t.dirty && t.nextCk.Before(at) {
		at = t.nextCk
	}
	if len(t.updates) > 0 && t.nextCk.Before(at) {
		at = t.nextCk
	}
	for f := range t.holding {
		if d := t.holdDeadline(f); !d.IsZero() && d.Before(at) {
			at = d
		}
	}
	if at.Before(now) {
		at = now
	}
	return at
}

func (t *tailer) sleep(ctx context.Context, until time.Time) {
	if t.w != nil {
		err := t.w.wait(until, func() bool { return ctx.Err() != nil }, t.onEvent)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			t.watchFailed(err)
		}
		return
	}
	tm := time.NewTimer(time.Until(until))
	defer tm.Stop()
	select {
	case <-ctx.Done():
	case <-tm.C:
	}
}

func (t *tailer) watchFailed(err error) {
	t.log.Warn("file input: inotify failed, polling from now on", "err", err)
	t.w.close()
	t.w = nil
}

// onEvent turns an inotify event into work: a file written to is read, a
// file created, moved or deleted brings the next scan forward.
func (t *tailer) onEvent(ev event) {
	if ev.overflow {
		t.scanSoon()
		return
	}
	if ev.mask&(unix.IN_MODIFY|unix.IN_CLOSE_WRITE) != 0 {
		if f := t.byPath[ev.path]; f != nil {
			f.changed = true
			t.activate(f)
			return
		}
		if t.matches(ev.path) {
			t.scanSoon()
		}
		return
	}
	t.scanSoon()
}

func (t *tailer) matches(p string) bool {
	if !t.cfg.glob {
		return p == t.cfg.pattern
	}
	ok, _ := filepath.Match(t.cfg.pattern, p)
	return ok
}

func (t *tailer) scanSoon() {
	at := t.lastScan.Add(minScanGap)
	if at.Before(t.nextScan) {
		t.nextScan = at
	}
}

func (t *tailer) activate(f *file) {
	if !f.active && f.state == stLive {
		f.active = true
		t.runq = append(t.runq, f)
	}
}

// readRound reads every active file, each up to roundBytes, and reports
// whether anything was read.
func (t *tailer) readRound(now time.Time) bool {
	progress := false
	q := t.runq
	t.runq = t.runq[len(t.runq):]
	var keep []*file
	for _, f := range q {
		if f.state != stLive || t.stopped {
			f.active = false
			continue
		}
		f.active = false // while it is read, another file may take its descriptor once it is at its end
		more, did := t.read(f, now)
		progress = progress || did
		if more && f.state == stLive {
			f.active = true
			keep = append(keep, f)
		}
	}
	if len(keep) > 0 {
		t.runq = append(keep, t.runq...)
	}
	return progress
}

// read reads f from its offset, up to roundBytes, and emits its records.
// more says f has more to read now; did says something was read.
func (t *tailer) read(f *file, now time.Time) (more, did bool) {
	if f.fd < 0 && !t.reopen(f) {
		return false, false
	}
	f.lastUse = now
	defer t.mark(f)
	for budget := roundBytes; budget > 0 && !t.stopped; {
		n, err := unix.Pread(f.fd, t.buf, f.off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.reportFile(f, "read_error", err)
			t.closeFD(f)
			return false, did
		}
		if n == 0 {
			var st unix.Stat_t
			if unix.Fstat(f.fd, &st) == nil {
				if st.Size < f.off {
					t.truncated(f, now)
					return false, true
				}
				f.size, f.mtime = st.Size, st.Mtim.Nano()
			}
			f.heldSince, f.heldLen = time.Time{}, 0
			f.changed = false
			return false, did
		}
		// The content is read before its start is checked again: if the
		// start changed (copytruncate, an overwrite), what was read may
		// be the new content at the old offset, and is dropped.
		if !t.verify(f) {
			t.truncated(f, now)
			return false, true
		}
		did = true
		if end := f.off + int64(n); end > f.hw {
			t.e.Received(int(end - f.hw))
			f.hw = end
		}
		ns := now.UnixNano()
		for _, m := range t.metas {
			m.RecvNS = ns
		}
		base := f.off
		consumed := f.split.split(t.buf[:n], func(line []byte, fl record.Flags, s, e int) {
			t.line(f, line, fl, base+int64(s), base+int64(e), now)
		})
		f.off += int64(consumed)
		budget -= n
		if f.off+int64(n-consumed) > f.size {
			f.size = f.off + int64(n-consumed)
		}
		if n < len(t.buf) { // the end, for now
			rest := int64(n - consumed)
			switch {
			case rest == 0:
				f.heldSince, f.heldLen = time.Time{}, 0
			case rest != f.heldLen || f.heldSince.IsZero():
				f.heldSince, f.heldLen = now, rest
				t.holding[f] = struct{}{}
			}
			f.changed = false
			return false, did
		}
	}
	return !t.stopped, did
}

// verify reports whether f's file still starts with the bytes it was
// fingerprinted by, and extends the fingerprint while the file is shorter
// than fpBytes.
func (t *tailer) verify(f *file) bool {
	n, err := unix.Pread(f.fd, t.head, 0)
	if err != nil {
		return true // cannot tell; the read reports errors
	}
	if n < f.fpLen || fingerprint(t.head[:f.fpLen]) != f.fp {
		return false
	}
	if n > f.fpLen {
		t.setFP(f, n, fingerprint(t.head[:n]))
	}
	return true
}

func (t *tailer) setFP(f *file, n int, fp uint64) {
	if f.state == stLive {
		t.unindexFP(f)
	}
	f.fpLen, f.fp = n, fp
	if f.state == stLive {
		k := fpKey{n, fp}
		t.liveFP[k] = append(t.liveFP[k], f)
	}
	t.dirty = true
}

func (t *tailer) unindexFP(f *file) {
	k := fpKey{f.fpLen, f.fp}
	l := t.liveFP[k]
	for i, g := range l {
		if g == f {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(t.liveFP, k)
	} else {
		t.liveFP[k] = l
	}
}

// truncated handles a file whose inode no longer holds the content f
// describes (copytruncate, truncation, an overwritten start): the inode's
// new content is read from its start as a new file, and f becomes an
// orphan that a copy of it (copytruncate's) continues from f's offset.
func (t *tailer) truncated(f *file, now time.Time) {
	t.m.Rotations.Inc()
	t.chargeFile() // f stays, an orphan, until its copy turns up or it expires
	n := t.newFile(f.path, f.at, f.id)
	n.fd, f.fd = f.fd, -1
	t.replaceOpen(f, n)
	t.removeLive(f)
	t.addOrphan(f, now)
	if k, err := unix.Pread(n.fd, t.head, 0); err == nil {
		n.fpLen, n.fp = k, fingerprint(t.head[:k])
	}
	var st unix.Stat_t
	if unix.Fstat(n.fd, &st) == nil {
		n.size, n.mtime = st.Size, st.Mtim.Nano()
	}
	n.seen, n.lastUse, n.rotated = f.seen, now, f.rotated
	t.addLive(n)
	t.setPath(n, n.at)
	t.activate(n)
}

// line handles one line of f: a container runtime's framing is decoded,
// partial lines and multi-line records are put together, and what is
// complete is emitted.
func (t *tailer) line(f *file, line []byte, fl record.Flags, start, end int64, now time.Time) {
	if f.format == formatAuto {
		f.format = detect(line)
	}
	var c containerLine
	var err error
	switch f.format {
	case formatCRI:
		c, err = decodeCRI(line)
	case formatDocker:
		c, t.dbuf, err = decodeDocker(line, t.dbuf[:0])
	default:
		c.content = line
	}
	if err != nil {
		t.m.DecodeError("container_format", 1)
		c = containerLine{content: line}
	}
	s := 0
	if c.stream == "stderr" {
		s = 1
	}
	h := f.cj[s]
	if c.partial || h.active() {
		if h == nil {
			h = &held{start: -1, acct: &t.held}
			f.cj[s] = h
		}
		if !h.active() {
			h.start, h.since, h.flags, h.stream = start, now, fl, c.stream
			h.time = append(h.time[:0], c.time...)
			t.holding[f] = struct{}{}
		}
		h.add(c.content)
		h.lines++
		h.end = end
		if c.partial {
			if len(h.buf) >= t.cfg.maxRecord {
				// Too long to wait for the rest: pass on what is held.
				t.joined(f, s, h.buf, h.stream, h.time, h.flags|record.FlagTruncated, h.start, end, now)
				h.reset()
				h.start, h.since, h.flags, h.stream = end, now, record.FlagContinuation, c.stream
				h.time = append(h.time[:0], c.time...)
			}
			t.enforceHeld(now)
			return
		}
		t.joined(f, s, trimCR(h.buf), h.stream, h.time, h.flags|fl, h.start, end, now)
		h.reset()
		t.enforceHeld(now)
		return
	}
	t.joined(f, s, trimCR(c.content), c.stream, c.time, fl, start, end, now)
	t.enforceHeld(now)
}

// joined handles one whole line (a container's partial lines already
// put together): the multi-line rule, then emit.
func (t *tailer) joined(f *file, s int, content []byte, stream string, ts []byte, fl record.Flags, start, end int64, now time.Time) {
	rule := f.rules[s]
	if rule == nil {
		t.emit(f, content, stream, ts, fl)
		return
	}
	h := f.ml[s]
	if h == nil {
		h = &held{start: -1, acct: &t.held}
		f.ml[s] = h
	}
	held := h.active()
	cont := rule.continues(content, held) && held && h.stream == stream
	if cont && h.lines < t.cfg.mlMaxLines && len(h.buf)+1+len(content) <= t.cfg.maxRecord {
		if h.lines > 0 {
			h.add(newline, content)
		} else {
			h.add(content)
		}
		h.lines++
		h.flags |= fl
		h.since, h.end = now, end
		return
	}
	if held {
		hf := h.flags
		if cont {
			hf |= record.FlagTruncated // the record goes on in the next one
		}
		if h.lines > 0 { // none: all it held was written out early
			t.emit(f, h.buf, h.stream, h.time, hf)
		}
		h.reset()
	}
	if cont {
		fl |= record.FlagContinuation
	}
	h.start, h.end, h.since, h.lines, h.flags, h.stream = start, end, now, 1, fl, stream
	h.buf = h.buf[:0]
	h.add(content)
	h.time = append(h.time[:0], ts...)
	t.holding[f] = struct{}{}
}

// enforceHeld writes out the largest records this tailer holds while the
// budget for incomplete records is spent, each flagged truncated, so the
// next piece of it starts a record flagged continuation: what files hold
// is bounded as what connections hold is, and never grown into.
func (t *tailer) enforceHeld(now time.Time) {
	for range 8 { // each round frees one buffer; a container's piece may move into a multi-line record first
		if !t.held.budget.Over() {
			return
		}
		var bf *file
		var bh *held
		cj := false
		for f := range t.holding {
			for i, h := range [...]*held{f.cj[0], f.cj[1], f.ml[0], f.ml[1]} {
				if h.active() && h.lines > 0 && (bh == nil || cap(h.buf) > cap(bh.buf)) {
					bf, bh, cj = f, h, i < 2
				}
			}
		}
		if bh == nil {
			return // what is over the budget is held elsewhere
		}
		t.forced()
		if cj {
			s := 0
			if bh == bf.cj[1] {
				s = 1
			}
			t.joined(bf, s, bh.buf, bh.stream, bh.time, bh.flags|record.FlagTruncated, bh.start, bh.end, now)
		} else {
			t.emit(bf, bh.buf, bh.stream, bh.time, bh.flags|record.FlagTruncated)
		}
		bh.free()
		bh.lines, bh.flags, bh.start = 0, record.FlagContinuation, bh.end
		bh.recount()
	}
}

// emit hands one record to the sink: the line as written (or a container
// runtime's line's content), decoded as every input's records are; the
// file's path goes in agg.file, the runtime's time in agg.source_time.
func (t *tailer) emit(f *file, content []byte, stream string, ts []byte, fl record.Flags) {
	m := t.metas[0]
	switch stream {
	case "stdout":
		m = t.metas[1]
	case "stderr":
		m = t.metas[2]
	}
	if m.File != f.path { // records of one file come in runs: rendered once per run
		m.File = f.path
		m.Prepare()
	}
	m.SourceTime = ts
	if !t.e.Emit(content, m, fl) {
		t.stopped = true
	}
}

// holdDeadline is when f's oldest waiting piece times out (zero: none).
func (t *tailer) holdDeadline(f *file) time.Time {
	var at time.Time
	earlier := func(d time.Time) {
		if at.IsZero() || d.Before(at) {
			at = d
		}
	}
	if !f.heldSince.IsZero() {
		earlier(f.heldSince.Add(t.cfg.partialAfter))
	}
	for s := range 2 {
		if f.cj[s].active() {
			earlier(f.cj[s].since.Add(t.cfg.partialAfter))
		}
		if f.ml[s].active() {
			earlier(f.ml[s].since.Add(t.cfg.mlTimeout))
		}
	}
	if !f.rotated.IsZero() && f.state == stLive {
		earlier(f.rotated.Add(t.cfg.rotateWait))
	}
	return at
}

// timeouts ends what waited too long: an unterminated last line (written
// flagged partial), a container's partial line, a multi-line record; and
// closes files that left their path once they are read to the end.
func (t *tailer) timeouts(now time.Time) {
	for f := range t.holding {
		d := t.holdDeadline(f)
		if d.IsZero() {
			delete(t.holding, f)
			continue
		}
		if now.Before(d) || t.stopped {
			continue
		}
		gone := f.state == stLive && !f.rotated.IsZero() && !now.Before(f.rotated.Add(t.cfg.rotateWait))
		t.flushHeld(f, now, gone)
		if gone && !f.active {
			t.forget(f)
		}
	}
	t.expireOrphans(now)
}

// flushHeld writes out what f holds that timed out (all of it when all).
func (t *tailer) flushHeld(f *file, now time.Time, all bool) {
	if f.state == stLive && !f.heldSince.IsZero() && (all || !now.Before(f.heldSince.Add(t.cfg.partialAfter))) {
		if f.fd >= 0 || t.reopen(f) {
			if n, err := unix.Pread(f.fd, t.buf[:min(int64(len(t.buf)), f.heldLen)], f.off); err == nil && n > 0 {
				base := f.off
				f.split.force(t.buf[:n], func(line []byte, fl record.Flags, s, e int) {
					t.line(f, line, fl, base+int64(s), base+int64(e), now)
				})
				f.off += int64(n)
			}
		}
		f.heldSince, f.heldLen = time.Time{}, 0
	}
	for s := range 2 {
		if h := f.cj[s]; h.active() && (all || !now.Before(h.since.Add(t.cfg.partialAfter))) {
			if h.lines > 0 {
				t.joined(f, s, h.buf, h.stream, h.time, h.flags|record.FlagPartial, h.start, f.off, now)
			}
			h.reset()
		}
		if h := f.ml[s]; h.active() && (all || !now.Before(h.since.Add(t.cfg.mlTimeout))) {
			if h.lines > 0 {
				t.emit(f, h.buf, h.stream, h.time, h.flags)
			}
			h.reset()
		}
	}
	t.mark(f)
}

// scan lists the files matching the pattern, follows renames and
// deletions, and starts reading new files. It is the authority on which
// files exist; inotify only makes it come sooner.
func (t *tailer) scan(now time.Time) {
	t.lastScan = now
	t.nextScan = now.Add(t.cfg.scan)
	t.scanGen++
	var paths []string
	if t.cfg.glob {
		paths, _ = filepath.Glob(t.cfg.pattern) // the pattern was validated
	} else {
		paths = []string{t.cfg.pattern}
	}
	type cand struct {
		path string
		st   unix.Stat_t
	}
	var first, second []cand
	for _, p := range paths {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			if !errors.Is(err, unix.ENOENT) {
				t.reportPath(p, causeOf(err), err)
			}
			continue
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				t.reportPath(p, "not_regular", nil)
			}
			continue
		}
		id := devino{st.Dev, st.Ino}
		if f := t.byID[id]; f != nil {
			if f.fd < 0 && (st.Size < f.off || st.Mtim.Nano() != f.mtime) && !t.stillHolds(f, p) {
				// Closed, and the inode now holds other content (deleted
				// and recycled): f is gone, the file is new.
				t.m.Rotations.Inc()
				t.forget(f)
				second = append(second, cand{p, st})
				continue
			}
			f.seen = t.scanGen
			t.setPath(f, p)
			if st.Size != f.off || f.fd < 0 && st.Size != f.size {
				f.changed = true
				t.activate(f)
			}
			if f.fd < 0 {
				f.size, f.mtime = st.Size, st.Mtim.Nano()
			}
			if !f.rotated.IsZero() {
				f.rotated = time.Time{} // back at a path the glob matches
			}
			continue
		}
		if t.restored[id] != nil {
			first = append(first, cand{p, st})
		} else {
			second = append(second, cand{p, st})
		}
	}
	for _, c := range first {
		t.discover(c.path, &c.st, now)
	}
	if t.firstScan {
		// Restored entries whose inode is gone or holds other content now:
		// their content may still turn up under another inode (a copy).
		for _, c := range t.restored {
			t.addOrphan(t.fromCheckpoint(c), now)
		}
		clear(t.restored)
	}
	for _, c := range second {
		t.discover(c.path, &c.st, now)
	}
	t.firstScan = false
	for f := range t.live {
		if f.seen == t.scanGen || !f.rotated.IsZero() {
			continue
		}
		// Renamed out of the glob, or deleted: read to the end (an open fd
		// still reads it), then closed once rotate_wait passed.
		t.m.Rotations.Inc()
		f.rotated = now
		if f.fd < 0 {
			if f.size > f.off {
				t.reportFile(f, "vanished", nil)
			}
			t.forget(f)
			continue
		}
		t.holding[f] = struct{}{}
		t.activate(f)
	}
	for p, since := range t.copyWait {
		if now.Sub(since) > 2*copyGrace {
			delete(t.copyWait, p)
		}
	}
	t.reportWaiting(now)
}

// stillHolds reports whether the file at p, which has f's inode, still
// starts with f's first bytes.
func (t *tailer) stillHolds(f *file, p string) bool {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return true // cannot tell: leave it to the read
	}
	defer unix.Close(fd)
	n, err := unix.Pread(fd, t.head, 0)
	return err == nil && n >= f.fpLen && fingerprint(t.head[:f.fpLen]) == f.fp
}

// discover decides what a file not seen before is: a file of the
// checkpoint, the copy of content that lost its inode, a copy of a file
// being read (waits), or new.
func (t *tailer) discover(p string, st *unix.Stat_t, now time.Time) {
	if t.files != nil && !t.files.Fits(fileCost) && len(t.orphans) == 0 && t.restored[devino{st.Dev, st.Ino}] == nil {
		// A new file, with no room to follow it: not opened at every scan.
		// (With orphans it must be looked at: it may be a copy of one.)
		t.filesWait++
		return
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		if !errors.Is(err, unix.ENOENT) {
			t.reportPath(p, causeOf(err), err)
		}
		return
	}
	var fst unix.Stat_t
	if unix.Fstat(fd, &fst) != nil || fst.Dev != st.Dev || fst.Ino != st.Ino {
		unix.Close(fd) // replaced since the stat: the next scan sees it
		return
	}
	n, err := unix.Pread(fd, t.head, 0)
	if err != nil {
		t.reportPath(p, causeOf(err), err)
		unix.Close(fd)
		return
	}
	if n == 0 && t.restored[devino{st.Dev, st.Ino}] == nil {
		// Nothing to tell it by yet: an empty file may be a copy about
		// to be written (copytruncate's), or a file about to be
		// written. It is decided on once it has bytes.
		unix.Close(fd)
		return
	}
	head := t.head[:n]
	id := devino{st.Dev, st.Ino}
	var f *file
	if c := t.restored[id]; c != nil {
		delete(t.restored, id)
		g := t.fromCheckpoint(c)
		if n >= g.fpLen && fingerprint(head[:g.fpLen]) == g.fp {
			f = g
			if fst.Size < f.off { // truncated while we were away
				t.m.Rotations.Inc()
				f.off, f.emitOff, f.committed, f.hw = 0, 0, 0, 0
				t.dirty = true
			}
		} else {
			t.addOrphan(g, now)
		}
	}
	if f == nil {
		if o := t.takeOrphan(head); o != nil {
			f = o // copytruncate's copy: go on where the content was left
			t.m.Rotations.Inc()
		}
	}
	if f == nil && n > 0 {
		if l := t.liveFP[fpKey{n, fingerprint(head)}]; len(l) > 0 && l[0].id != id {
			// Starts like a file being read: a copy about to become
			// copytruncate's, or a file with the same first bytes.
			since, ok := t.copyWait[p]
			if !ok {
				t.copyWait[p] = now
			}
			if !ok || now.Sub(since) < copyGrace {
				unix.Close(fd)
				t.scanSoon()
				return
			}
		}
	}
	delete(t.copyWait, p)
	if f == nil {
		if !t.takeFile() {
			unix.Close(fd) // found again by the next scan
			return
		}
		f = t.newFile(p, p, id)
		if t.firstScan && !t.hadCheckpoint && !t.cfg.fromStart {
			f.off = lastLineEnd(fd, fst.Size, t.buf)
			f.emitOff, f.committed, f.hw = f.off, f.off, f.off
		}
	}
	f.id, f.at, f.fd, f.state, f.seen, f.lastUse = id, p, fd, stLive, t.scanGen, now
	f.size, f.mtime, f.rotated = fst.Size, fst.Mtim.Nano(), time.Time{}
	k := min(n, fpBytes)
	if k > f.fpLen {
		f.fpLen, f.fp = k, fingerprint(head[:k])
	}
	if bytes.IndexByte(head, 0) >= 0 {
		t.reportFile(f, "binary", nil)
	}
	delete(t.problems, p)
	if len(t.openList) >= t.cfg.maxOpen && !t.evict() {
		// No descriptor free: the file waits, closed, and is opened
		// again by its identity when its turn comes.
		unix.Close(fd)
		f.fd = -1
	} else {
		t.openList = append(t.openList, f)
	}
	t.addLive(f)
	t.setPath(f, p)
	if t.w != nil {
		if err := t.w.watch(filepath.Dir(p)); err != nil {
			t.reportPath(filepath.Dir(p), "watch", err)
		}
	}
	t.dirty = true
	f.changed = true
	t.activate(f)
	if f.holding() {
		t.holding[f] = struct{}{}
	}
}

// lastLineEnd is where reading from the end starts: after the last
// newline, so a line being written is read whole.
func lastLineEnd(fd int, size int64, buf []byte) int64 {
	if size == 0 {
		return 0
	}
	from := max(0, size-int64(len(buf)))
	n, err := unix.Pread(fd, buf[:size-from], from)
	if err != nil {
		return size
	}
	if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
		return from + int64(i) + 1
	}
	if from == 0 {
		return 0
	}
	return size
}

func (t *tailer) addLive(f *file) {
	f.state = stLive
	t.live[f] = struct{}{}
	t.byID[f.id] = f
	k := fpKey{f.fpLen, f.fp}
	t.liveFP[k] = append(t.liveFP[k], f)
}

func (t *tailer) removeLive(f *file) {
	if f.state != stLive {
		return
	}
	delete(t.live, f)
	if t.byID[f.id] == f {
		delete(t.byID, f.id)
	}
	if t.byPath[f.at] == f {
		delete(t.byPath, f.at)
	}
	t.unindexFP(f)
	f.active = false
}

func (t *tailer) setPath(f *file, p string) {
	if f.at != p && t.byPath[f.at] == f {
		delete(t.byPath, f.at)
	}
	f.at = p
	t.byPath[p] = f
}

func (t *tailer) addOrphan(f *file, now time.Time) {
	f.state, f.orphanAt = stOrphan, now
	t.orphans = append(t.orphans, f)
	if len(t.orphans) > maxOrphans {
		t.dropOrphan(0)
	}
	t.dirty = true
}

// dropOrphan forgets orphan i; what it held in a record being put
// together is written out first.
func (t *tailer) dropOrphan(i int) {
	o := t.orphans[i]
	if o.holding() {
		t.flushHeld(o, time.Now(), true)
	}
	t.release(o)
	o.state = stGone
	delete(t.holding, o)
	t.orphans = append(t.orphans[:i], t.orphans[i+1:]...)
	t.dirty = true
}

// takeOrphan returns the orphan whose fingerprint head starts with.
func (t *tailer) takeOrphan(head []byte) *file {
	for i := len(t.orphans) - 1; i >= 0; i-- {
		o := t.orphans[i]
		if o.fpLen > 0 && o.fpLen <= len(head) && fingerprint(head[:o.fpLen]) == o.fp {
			t.orphans = append(t.orphans[:i], t.orphans[i+1:]...)
			return o
		}
	}
	return nil
}

// expireOrphans forgets content whose copy did not turn up; what it held
// in a record being put together is written out first.
func (t *tailer) expireOrphans(now time.Time) {
	for i := 0; i < len(t.orphans); {
		o := t.orphans[i]
		if now.Sub(o.orphanAt) < orphanTTL {
			i++
			continue
		}
		t.dropOrphan(i)
	}
}

// forget stops watching f, which is gone (or was replaced).
func (t *tailer) forget(f *file) {
	if f.holding() {
		t.flushHeld(f, time.Now(), true)
	}
	t.release(f)
	t.closeFD(f)
	t.removeLive(f)
	f.state = stGone
	delete(t.holding, f)
	t.dirty = true
}

// reopen opens a closed file again by its identity: the path it was last
// seen at must still name its inode and start with its first bytes.
func (t *tailer) reopen(f *file) bool {
	if len(t.openList) >= t.cfg.maxOpen && !t.evict() {
		return false // waits for a descriptor
	}
	fd, err := unix.Open(f.at, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			t.scanSoon() // moved: the scan finds it by its inode
			return false
		}
		t.reportFile(f, causeOf(err), err)
		return false
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Dev != f.id.dev || st.Ino != f.id.ino {
		unix.Close(fd)
		t.scanSoon()
		return false
	}
	f.fd = fd
	t.openList = append(t.openList, f)
	if f.problem != "" {
		t.log.Info("file input: readable again", "path", f.at, "was", f.problem)
		f.problem = ""
	}
	return true
}

// evict closes the least recently used open file that can be opened
// again: one at its path, not being read, read to its end.
func (t *tailer) evict() bool {
	best := -1
	for i, f := range t.openList {
		if f.active || !f.rotated.IsZero() || f.off < f.size || f.state != stLive {
			continue
		}
		if best < 0 || f.lastUse.Before(t.openList[best].lastUse) {
			best = i
		}
	}
	if best < 0 {
		return false
	}
	t.closeFD(t.openList[best])
	return true
}

func (t *tailer) closeFD(f *file) {
	if f.fd < 0 {
		return
	}
	unix.Close(f.fd)
	f.fd = -1
	for i, g := range t.openList {
		if g == f {
			t.openList = append(t.openList[:i], t.openList[i+1:]...)
			break
		}
	}
}

func (t *tailer) replaceOpen(old, n *file) {
	for i, g := range t.openList {
		if g == old {
			t.openList[i] = n
		}
	}
}

func (t *tailer) closeAll() {
	for _, f := range append([]*file(nil), t.openList...) {
		t.closeFD(f)
	}
}

// stats updates the gauges: files watched, bytes not yet written, the
// checkpoint's age.
func (t *tailer) stats(now time.Time) {
	t.nextStats = now.Add(statsEvery)
	var lag int64
	for f := range t.live {
		if f.size > f.committed {
			lag += f.size - f.committed
		}
	}
	t.m.Files.Set(float64(len(t.live)))
	t.m.LagBytes.Set(float64(lag))
	age := 0.0
	if saved := t.savedAt.Load(); lag > 0 || t.dirty || len(t.updates) > 0 {
		since := t.lastMoved
		if saved > 0 {
			since = time.Unix(0, saved)
		}
		age = now.Sub(since).Seconds()
	}
	t.m.CheckpointAge.Set(age)
}

// causeOf names an open or stat error for the report.
func causeOf(err error) string {
	switch {
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return "permission_denied"
	case errors.Is(err, unix.ELOOP):
		return "symlink_loop"
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return "vanished"
	}
	return "read_error"
}

// reportFile reports a problem with a known file once, until it changes.
func (t *tailer) reportFile(f *file, cause string, err error) {
	if f.problem == cause {
		return
	}
	f.problem = cause
	t.report(f.at, cause, err)
}

// reportPath reports a problem with a path not being read, once.
func (t *tailer) reportPath(p, cause string, err error) {
	if t.problems[p] == cause {
		return
	}
	if len(t.problems) > 10000 {
		clear(t.problems)
	}
	t.problems[p] = cause
	t.report(p, cause, err)
}

func (t *tailer) report(p, cause string, err error) {
	t.m.DecodeError("file_"+cause, 1)
	args := []any{"path", p, "cause", cause}
	if err != nil {
		args = append(args, "err", err)
	}
	t.log.Warn("file input: "+strings.ReplaceAll(cause, "_", " "), args...)
}

// staticDir is the longest directory prefix of pattern without glob
// metacharacters ("" when that is the root).
func staticDir(pattern string) string {
	dir := filepath.Dir(pattern)
	for strings.ContainsAny(dir, `*?[\`) {
		dir = filepath.Dir(dir)
	}
	if dir == "/" {
		return ""
	}
	return dir
}
