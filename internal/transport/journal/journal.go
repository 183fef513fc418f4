package journal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/transport"
)

// Scheme is the URL scheme of this transport.
const Scheme = "journal"

func init() {
	transport.Register(Scheme, New)
	transport.RegisterCheck(Scheme, func(u *url.URL, _ int) error {
		_, err := parseURL(u)
		return err
	})
}

// Transport is agg.transport of journal records.
const Transport = "journal"

// Command is the journalctl the listener runs (looked up in PATH).
var Command = "journalctl"

// config is what a journal URL says.
type config struct {
	dir     string   // journal files in this directory; "" = the system journal
	from    string   // "end" or "start": where a first run (no checkpoint) begins
	units   []string // --unit=U each
	matches []string // FIELD=VALUE each
	// url is the canonical URL (URL(), agg.listener); key the same
	// without "from", which names the checkpoint: where a first run
	// began does not change what the input reads.
	url, key string
}

// parseURL validates a journal URL:
//
//	journal://                      the system journal (what journalctl reads)
//	journal:///var/log/journal/remote   the journal files in a directory (journalctl --directory)
//	?from=end|start                 where the first run begins (default end: entries from now on)
//	?unit=ssh.service               only this unit's entries (journalctl --unit), repeatable
//	?match=FIELD=VALUE              only entries with this field (journalctl's matches), repeatable
func parseURL(u *url.URL) (config, error) {
	bad := func(format string, a ...any) (config, error) {
		return config{}, fmt.Errorf("%w: %s: %s", transport.ErrBadAddress, u.Redacted(), fmt.Sprintf(format, a...))
	}
	if u.Opaque != "" || u.Host != "" || u.User != nil || u.Fragment != "" {
		return bad("want journal:// (the system journal) or journal:///DIR (the journal files in DIR)")
	}
	c := config{from: "end"}
	if p := u.Path; p != "" && p != "/" {
		c.dir = filepath.Clean(p)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("%v", err)
	}
	for k, vs := range q {
		switch k {
		case "from":
			if len(vs) != 1 || (vs[0] != "end" && vs[0] != "start") {
				return bad("from must be end (entries from now on) or start (the whole journal), once")
			}
			c.from = vs[0]
		case "unit":
			for _, v := range vs {
				if v == "" || v[0] == '-' || len(v) > 256 || strings.ContainsFunc(v, func(r rune) bool { return r < 0x21 || r == 0x7f }) {
					return bad("unit %q: want a unit name or pattern, e.g. ssh.service", v)
				}
				c.units = append(c.units, v)
			}
		case "match":
			for _, v := range vs {
				name, _, ok := strings.Cut(v, "=")
				if !ok || !validFieldName(name) {
					return bad("match %q: want FIELD=VALUE, FIELD of A-Z, 0-9 and _ (not starting with a digit), e.g. _SYSTEMD_UNIT=ssh.service", v)
				}
				c.matches = append(c.matches, v)
			}
		default:
			return bad("unknown parameter %q (known: from, unit, match)", k)
		}
	}
	slices.Sort(c.units)
	slices.Sort(c.matches)
	key := url.Values{}
	for _, v := range c.units {
		key.Add("unit", v)
	}
	for _, v := range c.matches {
		key.Add("match", v)
	}
	base := &url.URL{Scheme: Scheme, Path: c.dir}
	if c.dir == "" {
		base = &url.URL{Scheme: Scheme, Host: ""}
	}
	c.key = canonical(base, key)
	if c.from != "end" {
		key.Set("from", c.from)
	}
	c.url = canonical(base, key)
	return c, nil
}

// canonical renders base with query q ("journal://" for the system
// journal, which url.URL would print as "journal:").
func canonical(base *url.URL, q url.Values) string {
	s := Scheme + "://" + base.EscapedPath()
	if len(q) > 0 {
		s += "?" + q.Encode()
	}
	return s
}

// validFieldName: journald's rule for field names (what a match names).
func validFieldName(s string) bool {
	if s == "" || len(s) > 64 || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Listener reads a journal through journalctl.
type Listener struct {
	cfg        config
	d          transport.Deps
	m          *metrics.Listener
	log        *slog.Logger
	journalctl string
	ckptPath   string
	lock       *transport.Lock
	// start is the checkpoint's cursor at Open ("" = none: cfg.from).
	start string

	// What the writers have confirmed (Written, from their goroutines),
	// and the hand-overs waiting for it.
	written atomic.Uint64 // the highest mark written
	mu      sync.Mutex
	marks   []markCursor // hand-overs in order, not yet known written
	saved   markCursor   // the last checkpoint saved
	// saveWarned is when a failed save was last logged (the saver's).
	saveWarned time.Time
	emitted    atomic.Uint64 // entries emitted (the reader's mark)

	closeOnce sync.Once
}

// markCursor is a hand-over: the mark of its last entry and that entry's
// cursor.
type markCursor struct {
	mark   uint64
	cursor string
}

// New opens a journal listener: it validates the URL, checks that
// journalctl and the directory are there, takes the checkpoint's lock (a
// second aggregator reading the same journal into the same state
// directory fails with transport.ErrInUse) and loads the checkpoint.
func New(u *url.URL, d transport.Deps) (transport.Listener, error) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.FDName != "" {
		return nil, fmt.Errorf("%w: %s: the journal is not a socket a service manager can pass", transport.ErrBadAddress, u.Redacted())
	}
	cfg, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	transport.Relabel(&d, cfg.url)
	if cfg.dir != "" {
		st, err := os.Stat(cfg.dir)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", transport.ErrBadAddress, cfg.url, err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("%w: %s: %s is not a directory", transport.ErrBadAddress, cfg.url, cfg.dir)
		}
	}
	bin, err := exec.LookPath(Command)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (journalctl, from the systemd package, reads the journal)", cfg.url, err)
	}
	dir := d.StateDir
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%s: state directory: %w", cfg.url, err)
	}
	l := &Listener{cfg: cfg, d: d, log: d.Log, journalctl: bin, ckptPath: transport.CheckpointPath(dir, Scheme, cfg.key)}
	if d.Metrics != nil {
		l.m = d.Metrics.ForInput()
	}
	l.lock, err = transport.AcquireLock(l.ckptPath + ".lock")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.url, err)
	}
	l.start, _, err = loadCheckpoint(l.ckptPath)
	if err != nil {
		l.lock.Release()
		return nil, fmt.Errorf("%s: %w", cfg.url, err)
	}
	l.saved.cursor = l.start
	return l, nil
}

// URL implements transport.Listener.
func (l *Listener) URL() string { return l.url() }

func (l *Listener) url() string { return l.cfg.url }

// CheckpointPath is the file the listener keeps its cursor in.
func (l *Listener) CheckpointPath() string { return l.ckptPath }

// Close implements transport.Listener: it releases the checkpoint's lock.
// Safe after Run returned.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { l.lock.Release() })
	return nil
}

// Written implements pipeline.Completer: every entry up to mark is
// written to every output it was routed to (or dropped on purpose by a
// rule). Called from the writers' goroutines; it only records the mark
// (the saver turns it into a cursor).
func (l *Listener) Written(mark uint64) {
	for {
		old := l.written.Load()
		if mark <= old || l.written.CompareAndSwap(old, mark) {
			return
		}
	}
}

// sealed records that the entries up to mark, the last with cursor, were
// handed over in one go: once Written reaches mark, cursor may be saved.
func (l *Listener) sealed(mark uint64, cursor []byte) {
	l.mu.Lock()
	if n := len(l.marks); n == 0 || l.marks[n-1].mark < mark {
		l.marks = append(l.marks, markCursor{mark, string(cursor)})
	}
	l.mu.Unlock()
}

// confirmed is the latest hand-over known written: its cursor is the
// checkpoint to save.
func (l *Listener) confirmed() markCursor {
	w := l.written.Load()
	l.mu.Lock()
	defer l.mu.Unlock()
	best := l.saved
	i := 0
	for i < len(l.marks) && l.marks[i].mark <= w {
		best = l.marks[i]
		i++
	}
	l.marks = append(l.marks[:0], l.marks[i:]...)
	return best
}

// save writes the checkpoint if it moved since the last save.
func (l *Listener) save() {
	c := l.confirmed()
	if c.cursor == "" || c.cursor == l.saved.cursor {
		return
	}
	if err := saveCheckpoint(l.ckptPath, l.cfg.url, c.cursor); err != nil {
		// Said once a minute, not at every try (once a second).
		if time.Since(l.saveWarned) >= time.Minute {
			l.saveWarned = time.Now()
			l.log.Warn("journal checkpoint not saved; reading goes on, a restart would repeat what was read since the last one",
				"path", l.ckptPath, "err", err)
		}
		return
	}
	l.mu.Lock()
	l.saved = c
	l.mu.Unlock()
	if l.m != nil && l.m.CheckpointAge != nil {
		l.m.CheckpointAge.Set(0)
	}
}

// saveEvery is how often the checkpoint may move: a save is two fsyncs.
// The saver looks every saveLook, so a checkpoint that may move moves
// within saveLook of the writers' confirmation.
const (
	saveEvery = time.Second
	saveLook  = 100 * time.Millisecond
)

// saver saves the checkpoint at most every saveEvery while ctx lasts,
// and keeps the input's gauges current.
func (l *Listener) saver(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(saveLook)
	defer t.Stop()
	moved := time.Now() // or when the checkpoint file was last written
	if st, err := os.Stat(l.ckptPath); err == nil {
		moved = st.ModTime()
	}
	var lastSave time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Since(lastSave) >= saveEvery {
			before := l.saved.cursor
			l.save()
			if l.saved.cursor != before {
				moved, lastSave = time.Now(), time.Now()
			}
		}
		if l.m != nil && l.m.LagRecords != nil {
			l.m.CheckpointAge.Set(time.Since(moved).Seconds())
			e, w := l.emitted.Load(), l.written.Load()
			l.m.LagRecords.Set(float64(e - min(e, w)))
		}
	}
}

// Run implements transport.Listener: it runs journalctl, restarted with
// back-off when it dies, until ctx ends, then saves the checkpoint of
// what was written and returns. See the package doc.
func (l *Listener) Run(ctx context.Context) error {
	defer l.Close()
	e := l.d.Sink.Emitter(l.m)
	defer e.Release()
	r := &reader{l: l, e: e, meta: &record.Meta{Transport: Transport, Listener: l.cfg.url}}
	r.meta.Prepare()
	r.cursor = append(r.cursor, l.start...)
	if l.start == "" && l.cfg.from == "end" {
		r.resolveEnd(ctx) // before the saver, which owns l.saved from now on
	}
	saveCtx, stopSaver := context.WithCancel(context.Background())
	saverDone := make(chan struct{})
	go l.saver(saveCtx, saverDone)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watchDone := make(chan struct{})
	go l.watch(watchCtx, watchDone)
	backoff := minBackoff
	for ctx.Err() == nil && e.Err() == nil {
		began := time.Now()
		err := r.follow(ctx)
		if ctx.Err() != nil || e.Err() != nil {
			break
		}
		if time.Since(began) > healthyRun {
			backoff = minBackoff
		}
		l.log.Warn("journalctl ended; starting it again", "after", backoff, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
	stopWatch()
	<-watchDone
	// Hand over what was read, and wait (at most until the hard stop)
	// for the writers to confirm it, so the checkpoint saved last covers
	// it.
	if e.Pending() > 0 {
		l.sealed(r.mark, r.cursor)
	}
	flushErr := e.Flush()
	hard := l.d.Sink.HardStop()
	for flushErr == nil && l.written.Load() < r.mark && hard.Err() == nil {
		select {
		case <-hard.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
	stopSaver()
	<-saverDone
	l.save()
	return nil
}

// Back-off between journalctl's runs: doubled after each that ended
// within healthyRun of its start.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 30 * time.Second
	healthyRun = time.Minute
)

// reader is the state of Run's goroutine: its Emitter, where it is in the
// journal, and what it has emitted.
type reader struct {
	l    *Listener
	e    *sink.Emitter
	meta *record.Meta
	rend renderer
	// mark counts the entries emitted; cursor is the last one's cursor
	// (or where reading starts, before the first), the place journalctl
	// resumes after when it is started again.
	mark   uint64
	cursor []byte
	// sealedMark is the last mark passed to sealed.
	sealedMark uint64
	// seqnums is the last sequence number seen per journal sequence
	// (a cursor's s=), to see entries the journal skipped.
	seqnums map[string]uint64
	curSeq  []byte // the sequence of the last entry, and its number
	curNum  uint64
	notice  []byte
	// fromNow: with no cursor, follow from the next entry on (from=end
	// when the journal's last entry could not be found).
	fromNow bool
	// rereads is what is left of the budget for reading torn entries
	// again (verify.go), and when it was last topped up.
	rereads struct {
		tokens int
		at     time.Time
	}
}

// handOver notes that the Emitter just handed its batches over (an Emit
// that returned with one record pending started a new batch): the marks
// given to Done so far ride with them, so the cursor of the last entry
// before may be saved once they are written.
func (r *reader) handOver() {
	if r.e.Pending() == 1 && r.mark > r.sealedMark {
		r.l.sealed(r.mark, r.cursor)
		r.sealedMark = r.mark
	}
}

// emit hands one entry's record to the Emitter, read again first if it
// came torn (mend). It reports false at the hard stop.
func (r *reader) emit(ctx context.Context, ent *Entry) bool {
	size := ent.Size
	if ent = r.mend(ctx, ent); ent == nil {
		return false
	}
	cursor := fieldValue(ent, "__CURSOR")
	if r.seqnums != nil || len(r.l.cfg.units)+len(r.l.cfg.matches) == 0 {
		r.checkGap(cursor)
	}
	payload, rd := r.rend.render(ent)
	r.meta.RecvNS = time.Now().UnixNano()
	if rd.peer != r.meta.Peer {
		r.meta.Peer = rd.peer
		r.meta.Prepare()
	}
	r.e.Received(size)
	ok := r.e.Emit(payload, r.meta, rd.flags)
	r.handOver()
	if !ok {
		return false
	}
	r.mark++
	r.l.emitted.Store(r.mark)
	if cursor != nil {
		r.cursor = append(r.cursor[:0], cursor...)
	}
	r.e.Done(pipeline.Completion{To: r.l, Mark: r.mark})
	return true
}

// fieldValue is the value of e's first field called name, or nil.
func fieldValue(e *Entry, name string) []byte {
	for i := range e.Fields {
		if string(e.Fields[i].Name) == name {
			return e.Fields[i].Value
		}
	}
	return nil
}

var errStopped = errors.New("journal: stopped")
