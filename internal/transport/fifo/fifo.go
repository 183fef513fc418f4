// Package fifo is the named-pipe listener (scheme "fifo", e.g.
// fifo:///run/logagg.fifo).
//
// New takes the path (transport.ClaimPath: PATH.lock, so a second instance
// fails with ErrInUse; a stale FIFO or socket of ours is replaced; a
// regular file or another user's FIFO is an error and left untouched),
// creates the FIFO with exactly the configured mode and group and opens it
// O_RDWR|O_NONBLOCK. Holding a write end ourselves
// means the reader never sees EOF when the last writer closes, so the
// listener keeps serving writers that come and go (a plain O_RDONLY reader
// would see EOF after the first writer left). The fd is wrapped with
// os.NewFile, so reads park in Go's poller instead of a thread.
//
// Atomicity: all writers share one byte stream. Linux makes a write of up
// to PIPE_BUF (4096) bytes atomic, so concurrent writers' lines do not
// interleave as long as each writes whole lines of at most 4096 bytes per
// write(2). Longer writes may be split and interleaved with other writers'.
//
// The sender is unknown: a FIFO carries no credentials (records have no
// agg.peer).
//
// Shutdown: when ctx ends, Run stops its blocking read, then reads what the
// pipe still holds until read(2) says EAGAIN (nothing buffered) or
// Options.DrainGrace passed, submits it, closes the fd and removes the FIFO.
package fifo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/peerid"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/stream"
)

// Scheme is the URL scheme of this transport.
const Scheme = "fifo"

func init() { transport.Register(Scheme, New) }

// Listener is an open FIFO.
type Listener struct {
	f         *os.File
	claim     *transport.Claim
	path      string
	url       string
	d         transport.Deps
	closeOnce sync.Once
	closeErr  error
}

// New creates and opens the FIFO named by u.
func New(u *url.URL, d transport.Deps) (transport.Listener, error) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	path, err := transport.PathOf(u)
	if err != nil {
		return nil, err
	}
	canonical := (&url.URL{Scheme: Scheme, Path: path}).String()
	transport.Relabel(&d, canonical)
	claim, err := transport.ClaimPath(path, transport.NodeFIFO)
	if err != nil {
		return nil, err
	}
	fd, err := claim.MakeFIFO(d.Opts)
	if err != nil {
		claim.Release()
		return nil, err
	}
	if n := d.Opts.RcvBuf; n > 0 {
		if pmax := pipeMaxSize(); pmax > 0 && n > pmax {
			n = pmax
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETPIPE_SZ, n); err != nil {
			d.Log.Warn("pipe size not set", "path", path, "size", n, "err", err)
		}
	}
	if got, err := unix.FcntlInt(uintptr(fd), unix.F_GETPIPE_SZ, 0); err == nil && d.Metrics != nil {
		d.Metrics.RcvBuf.Set(float64(got))
	}
	return &Listener{
		f:     os.NewFile(uintptr(fd), path),
		claim: claim,
		path:  path,
		url:   canonical,
		d:     d,
	}, nil
}

// pipeMaxSize is the largest pipe an unprivileged F_SETPIPE_SZ may ask for.
func pipeMaxSize() int {
	b, err := os.ReadFile("/proc/sys/fs/pipe-max-size")
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// URL implements transport.Listener.
func (l *Listener) URL() string { return l.url }

// Close implements transport.Listener: it closes the FIFO, removes it (if
// it is still the one we made) and releases the lock. Safe after Run
// returned.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.closeErr = l.f.Close()
		l.claim.Release()
	})
	return l.closeErr
}

// stalePartial: an incomplete line that nothing followed for this long is
// written out flagged partial before newer bytes, which then start a new
// record. All writers share one byte stream and a FIFO says nothing about
// who wrote what, so a writer that dies or exits mid-line would otherwise
// glue the next writer's record onto its half line. A writer's own line
// arrives in one write(2) (atomic up to PIPE_BUF) or in writes microseconds
// apart; 250 ms is far beyond that. A second writer within 250 ms of the
// half line still glues onto it; nothing in a FIFO can tell them apart.
const stalePartial = 250 * time.Millisecond

// Run implements transport.Listener.
func (l *Listener) Run(ctx context.Context) error {
	defer l.Close()
	meta := &record.Meta{Transport: Scheme, Listener: l.url, ParseHostname: true}
	meta.Prepare()
	rd := stream.NewReader(meta, l.d, false)
	rd.StalePartial = stalePartial
	defer rd.Release()

	// Ending ctx wakes the blocked read; the deadline stays in the past,
	// so a read started later returns at once too.
	stop := context.AfterFunc(ctx, func() { l.f.SetReadDeadline(time.Now()) })
	defer stop()
	src := &writerLookup{f: l.f, meta: meta, path: l.path}
	for {
		_, err := rd.ReadFrom(src)
		if ctx.Err() != nil && (err == nil || errors.Is(err, os.ErrDeadlineExceeded)) {
			break
		}
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			continue // no EOF while we hold a write end; never stop serving
		}
		if ctx.Err() != nil { // Submit gave up at the hard stop
			return nil
		}
		return fmt.Errorf("read %s: %w", l.path, err)
	}

	// Drain: what writers already put in the pipe, until EAGAIN.
	if err := l.f.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("drain %s: %w", l.path, err)
	}
	rc, err := l.f.SyscallConn()
	if err != nil {
		return fmt.Errorf("drain %s: %w", l.path, err)
	}
	_, err = rd.ReadFrom(&stream.DrainReader{RC: rc, Until: time.Now().Add(l.d.Opts.DrainGrace)})
	ferr := rd.Finish()
	if err != nil && ferr == nil && ctx.Err() == nil {
		return fmt.Errorf("drain %s: %w", l.path, err)
	}
	return nil
}

// writerLookup reads the FIFO and, at most once a second while data flows,
// finds the processes holding it open for writing (peerid.FIFOWriters). The
// kernel does not say which writer wrote which bytes, so a peer is reported
// only while exactly one writer holds the FIFO.
type writerLookup struct {
	f    *os.File
	meta *record.Meta
	path string
	next time.Time
}

func (w *writerLookup) Read(p []byte) (int, error) {
	n, err := w.f.Read(p)
	if n > 0 {
		if now := time.Now(); now.After(w.next) {
			w.next = now.Add(time.Second)
			peer := record.Peer{}
			if ws, _ := peerid.FIFOWriters(w.path, peerid.DefaultBudget); len(ws) == 1 {
				peer = ws[0]
			}
			if peer != w.meta.Peer {
				w.meta.Peer = peer
				w.meta.Prepare()
			}
		}
	}
	return n, err
}
