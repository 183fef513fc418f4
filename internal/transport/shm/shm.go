// Package shm is the shm:// transport: one shared-memory ring per producer.
//
// URL: shm:///path/to/control.sock?size=4MiB&spin=2000
//
//   - size: data area of each producer's ring, a power of two (default 4 MiB).
//   - spin: polls of the ring before the reader sleeps on its futex (default 2000).
//
// A producer connects to the unix control socket at the URL's path; the
// listener creates a ring in a sealed memfd (internal/shmring), sends it
// with SCM_RIGHTS and serves it from one goroutine until the control
// connection closes. The peer's pid/uid/gid come from SO_PEERCRED (via
// "kernel").
//
// Framing: one ring frame holds one or more records separated by '\n' (a
// trailing newline is optional, empty lines are skipped). A frame larger
// than the ring can hold (size - 12 bytes) is refused by the writer with
// shmring.ErrTooLarge, never truncated; a record longer than --max-record
// is truncated to it and flagged "truncated" here, as on every other
// transport.
//
// # Lifecycle
//
// Open binds the control socket. Run accepts until ctx ends, each producer
// only once its ring exists (made before accept) and its slot and
// descriptors are reserved: short of any, new producers wait in the
// backlog (ADR 0052). A producer that exits or crashes is seen as EOF on
// its control connection: its ring is drained, unmapped and closed. When ctx ends Run stops accepting, marks
// every ring closed (a writer's next Write fails with shmring.ErrClosed),
// drains every ring to empty — waiting up to Options.DrainGrace for a
// writer that was between its closed-check and its commit — submits what
// it read, releases the rings, removes the socket file and returns.
//
// # Concurrency
//
// One goroutine per producer owns that producer's ring, encoder and batch;
// the listener only shares the set of live connections (under a mutex).
package shm

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/shmring"
	"github.com/ipclab/logagg/internal/transport"
)

// Scheme is the URL scheme of this transport.
const Scheme = "shm"

func init() { transport.Register(Scheme, New) }

// Listener serves shm:// producers.
type Listener struct {
	url   string
	path  string
	claim *transport.Claim
	cfg   shmring.Config
	ln    *net.UnixListener
	d     transport.Deps

	stopping atomic.Bool
	// adm is reserved for each producer before accept: a slot when
	// MaxConns is set, and two descriptors (the control connection and
	// the ring's memfd until it is sent). The ring itself is made before
	// accept too, so a producer is accepted only once what serves it
	// exists; short of any of it, new producers wait in the backlog.
	adm   *transport.Admission
	mu    sync.Mutex
	conns map[*producer]struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

// ParseURL returns the control socket path and ring configuration of an
// shm:// URL. It is shared with the client so both read the URL the same way.
func ParseURL(u *url.URL) (path string, cfg shmring.Config, err error) {
	path, err = transport.PathOf(u)
	if err != nil {
		return "", cfg, err
	}
	q := u.Query()
	for k := range q {
		if k != "size" && k != "spin" {
			return "", cfg, fmt.Errorf("%w: %s: unknown parameter %q (known: size, spin)", transport.ErrBadAddress, u.Redacted(), k)
		}
	}
	if s := q.Get("size"); s != "" {
		if cfg.Size, err = shmring.ParseSize(s); err != nil {
			return "", cfg, fmt.Errorf("%w: %s: size: %w", transport.ErrBadAddress, u.Redacted(), err)
		}
		if cfg.Size == 0 {
			return "", cfg, fmt.Errorf("%w: %s: size must be > 0", transport.ErrBadAddress, u.Redacted())
		}
	}
	if s := q.Get("spin"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return "", cfg, fmt.Errorf("%w: %s: spin must be a count >= 0", transport.ErrBadAddress, u.Redacted())
		}
		cfg.Spin = n
		if n == 0 {
			cfg.Spin = -1 // explicit 0: sleep at once
		}
	}
	return path, cfg, nil
}

// New binds the control socket of u (the transport.Factory for "shm").
func New(u *url.URL, d transport.Deps) (transport.Listener, error) {
	path, cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	if cfg.Size == 0 && d.Opts.ShmRing > 0 {
		// The daemon's memory budget sizes rings the URL does not:
		// the largest power of two within it.
		cfg.Size = max(1<<(bits.Len(uint(d.Opts.ShmRing))-1), shmring.MinSize)
	}
	// Validate the ring settings now, not at the first producer.
	probe, err := shmring.Create(shmring.Config{Size: cfg.Size, Spin: cfg.Spin, MaxFrame: cfg.MaxFrame})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", transport.ErrBadAddress, u.Redacted(), err)
	}
	cfg = probe.Config()
	probe.Close()
	// The control socket is the address: PATH.lock keeps a second
	// instance off it, and the file is removed (once drained) only while
	// it is still ours.
	claim, err := transport.ClaimPath(path, transport.NodeSocket)
	if err != nil {
		return nil, err
	}
	ln, err := claim.ListenUnix(d.Opts)
	if err != nil {
		claim.Release()
		return nil, err
	}
	if d.Log != nil {
		d.Log.Info("listening", "url", u.String(), "transport", Scheme, "ring_bytes", cfg.Size,
			"spin", cfg.Spin, "max_frame", cfg.MaxFrame)
	}
	l := &Listener{url: u.String(), path: path, claim: claim, cfg: cfg, ln: ln, d: d, conns: map[*producer]struct{}{}}
	// A producer holds its ring of the connections' memory besides what
	// any connection holds (the daemon sizes rings so that four fit).
	l.adm = transport.NewAdmission(transport.ListenerAdmissionConfig(d, int64(shmring.MappedSize(cfg))+transport.ConnCost,
		metrics.PauseMaxConns, metrics.PauseFDs, metrics.PauseMemory))
	return l, nil
}

// URL implements transport.Listener.
func (l *Listener) URL() string { return l.url }

// Close implements transport.Listener: it releases the socket of a
// listener whose Run was never called; after Run it does nothing.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		err = l.ln.Close()
		l.claim.Release()
	})
	return err
}

// Run implements transport.Listener.
func (l *Listener) Run(ctx context.Context) error {
	actx, stopAccepting := context.WithCancel(ctx)
	defer stopAccepting()
	acceptErr := make(chan error, 1)
	go func() { acceptErr <- l.accept(actx) }()
	if testHookRunStarted != nil {
		testHookRunStarted()
	}
	var err error
	acceptEnded := false
	select {
	case <-ctx.Done():
	case err = <-acceptErr:
		// With ctx ended, accept returns nil at once: both cases may be
		// ready, and this one taken (its result read here, not below).
		acceptEnded = true
	}
	l.stopping.Store(true)
	stopAccepting()
	l.ln.Close()
	if !acceptEnded {
		<-acceptErr
	}
	l.mu.Lock()
	for p := range l.conns {
		p.stop()
	}
	l.mu.Unlock()
	l.wg.Wait()
	l.once.Do(l.claim.Release)
	return err
}

// testHookRunStarted, when set by a test, runs in Run between starting
// the accept goroutine and waiting for it or for the context.
var testHookRunStarted func()

// ringFDs is what a producer needs before it is accepted: its control
// connection and, until the ring is sent, the ring's memfd.
const ringFDs = 2

func (l *Listener) accept(ctx context.Context) error {
	// spare is the ring of the next producer, made before it is accepted.
	var spare *shmring.Reader
	defer func() {
		if spare != nil {
			spare.Close()
			l.adm.Release(1, false)
		}
	}()
	for {
		need := 1
		if spare == nil {
			need = ringFDs
		}
		if !l.adm.Admit(ctx, need) {
			return nil
		}
		if spare == nil {
			ring, err := shmring.Create(l.cfg)
			if err != nil {
				l.adm.Refund(need, true)
				if !l.adm.Failed(ctx, err) {
					return nil
				}
				continue
			}
			l.adm.Commit(1, ring.FD())
			spare = ring
		}
		c, err := l.ln.AcceptUnix()
		if err != nil {
			l.adm.Refund(1, true)
			if ctx.Err() != nil || l.stopping.Load() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// EMFILE and friends: nothing was accepted; pause (counted)
			// instead of failing the daemon or spinning.
			if !l.adm.Failed(ctx, err) {
				return nil
			}
			continue
		}
		l.adm.Commit(1, -1)
		ring := spare
		spare = nil
		l.mu.Lock()
		if l.stopping.Load() {
			l.mu.Unlock()
			c.Close()
			ring.Close()
			l.adm.Release(ringFDs, true)
			continue
		}
		p, err := l.newProducer(c, ring)
		if err != nil {
			// The producer went away before its ring was sent (or the
			// kernel refused the message): it sees its dial fail.
			l.mu.Unlock()
			c.Close()
			ring.Close()
			l.adm.Release(ringFDs, true)
			if l.d.Log != nil {
				l.d.Log.Warn("shm: producer setup failed", "url", l.url, "err", err)
			}
			continue
		}
		l.adm.Release(1, false) // the memfd, sent and closed
		l.conns[p] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		if m := l.d.Metrics; m != nil {
			m.Accepted.Inc()
			m.Conns.Inc()
		}
		go l.serve(p)
	}
}

type producer struct {
	c    *net.UnixConn
	ring *shmring.Reader
	meta record.Meta
	wake *ctlWaiter
	// written is signalled (never blocking) each time the writer released
	// a batch's frames, for the wait before the ring is closed.
	written chan struct{}
	// submitted is the ring mark of the last completion given to the sink
	// with records (serve's goroutine only): once no record is pending,
	// every batch up to it has been handed to the pipeline.
	submitted uint64
}

// releaseEmpty gives back frames that held no record (nothing will write
// them) once every batch before them is written; serve's goroutine only,
// with no records pending in the sink.
func (p *producer) releaseEmpty() {
	if mark := p.ring.ReadMark(); mark > p.submitted && p.ring.Released() >= p.submitted {
		p.ring.Release(mark)
	}
}

// Written implements pipeline.Completer: the batch whose frames end at
// mark is in the output, so the producer may reuse their space. Until
// then the frames stay in the ring, and a producer whose aggregator died
// offers them to the next one.
func (p *producer) Written(mark uint64) {
	p.ring.Release(mark)
	select {
	case p.written <- struct{}{}:
	default:
	}
}

// newProducer sends ring to the producer at c and sets up serving it;
// the ring's memfd is closed once sent.
func (l *Listener) newProducer(c *net.UnixConn, ring *shmring.Reader) (*producer, error) {
	p := &producer{c: c, wake: &ctlWaiter{c: c}, written: make(chan struct{}, 1)}
	p.meta = record.Meta{Transport: Scheme, Listener: l.url, ParseHostname: true}
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			if cr, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
				p.meta.Peer = record.Peer{HasCreds: true, PID: cr.Pid, UID: cr.Uid, GID: cr.Gid, Via: "kernel"}
			}
		})
	}
	p.meta.Prepare()
	if err := ring.Send(c); err != nil {
		return nil, err
	}
	ring.DropFD()
	ring.SetManualRelease(true)
	p.ring = ring
	l.d.Memory().Add(metrics.MemShmRings, int64(shmring.MappedSize(l.cfg)))
	return p, nil
}

// stop makes the producer's goroutine finish: its ring is closed to new
// frames and a wait in progress ends.
func (p *producer) stop() {
	p.ring.MarkClosed()
	p.ring.Wake()
	p.wake.interrupt()
}

// serve drains one producer's ring until it disconnects, goes idle past
// Options.IdleTimeout, or shutdown ends. While the ring is empty the
// goroutine waits for the writer's wake-up byte on the control socket,
// parked in the netpoller: an idle producer holds no OS thread.
func (l *Listener) serve(p *producer) {
	defer l.wg.Done()
	e := l.d.Sink.Emitter(l.d.Metrics)
	// Every batch releases the frames its records came from once it is
	// written: the ring keeps what is not yet in the output. Poll has
	// moved the read mark past a frame when it hands it over.
	message := func(f []byte) {
		if e.Pending() == 0 {
			p.meta.RecvNS = time.Now().UnixNano()
		}
		e.Received(len(f))
		e.Message(f, l.d.Opts.MaxRecord, false, &p.meta)
		if mark := p.ring.ReadMark(); e.Done(pipeline.Completion{To: p, Mark: mark}) {
			p.submitted = mark
		}
	}
	var stopAt time.Time
	lastData := time.Now()
	for {
		n, err := p.ring.Poll(message)
		if err != nil {
			// A hostile or broken producer: keep what was good, drop it.
			if m := l.d.Metrics; m != nil {
				m.DecodeError(metrics.KindFraming, 1)
			}
			if l.d.Log != nil {
				l.d.Log.Warn("shm: dropping producer with corrupt ring", "url", l.url, "pid", p.meta.Peer.PID, "err", err)
			}
			break
		}
		if e.Err() != nil {
			break
		}
		if n > 0 {
			lastData = time.Now()
			p.wake.spurious = 0
			continue
		}
		if e.Flush() != nil {
			break
		}
		p.releaseEmpty()
		if p.wake.gone.Load() {
			// Everything the producer published happened before its
			// control socket closed, so one more Poll sees all of it.
			p.ring.Poll(message)
			break
		}
		if l.stopping.Load() {
			if stopAt.IsZero() {
				stopAt = time.Now()
			} else if time.Since(stopAt) >= l.d.Opts.DrainGrace {
				p.ring.Poll(message)
				break
			}
		}
		if idle := l.d.Opts.IdleTimeout; idle > 0 && time.Since(lastData) >= idle && !l.stopping.Load() {
			// Its next Write fails with ErrClosed: the producer sees it.
			p.ring.MarkClosed()
			p.ring.Poll(message)
			break
		}
		p.wake.throttle()
		p.ring.Wait(p.wake)
	}
	if e.Flush() == nil {
		l.awaitWritten(p)
	}
	e.Release()
	l.mu.Lock()
	delete(l.conns, p)
	l.mu.Unlock()
	p.ring.Close()
	l.d.Memory().Add(metrics.MemShmRings, -int64(shmring.MappedSize(l.cfg)))
	p.c.Close()
	if m := l.d.Metrics; m != nil {
		m.Conns.Dec()
	}
	l.adm.Release(1, true)
}

// awaitWritten keeps the ring until the writer has released every frame
// read from it, or the hard stop: a producer that is still there (the
// ring was closed at shutdown or for idleness) then sees its frames
// released and does not offer them to the next aggregator again.
func (l *Listener) awaitWritten(p *producer) {
	hardStop := l.d.Sink.HardStop().Done()
	for p.ring.Released() < p.submitted {
		select {
		case <-p.written:
		case <-hardStop:
			return
		}
	}
	p.releaseEmpty()
}

// ctlWaiter is the shmring.Waiter of one producer: it waits for the
// writer's wake-up byte on the control socket, and notices there when the
// producer closed or died (EOF).
type ctlWaiter struct {
	c       *net.UnixConn
	buf     [256]byte
	gone    atomic.Bool // EOF or an error on the control socket
	stopped atomic.Bool // interrupt was called
	// spurious counts wake-ups in a row that brought no frame. A writer
	// wakes us once per sleep; one that keeps writing to the socket is
	// broken or hostile, and throttle makes its wake-ups cost us little.
	spurious int
}

// maxSpurious wake-ups in a row are served at once; past that each costs
// a pause that doubles up to maxThrottle, bounding what a flood of wake-up
// bytes costs the reader to about one read per maxThrottle.
const (
	maxSpurious = 16
	maxThrottle = 100 * time.Millisecond
)

// WaitWake implements shmring.Waiter.
func (w *ctlWaiter) WaitWake(d time.Duration) {
	if w.stopped.Load() || w.gone.Load() {
		return
	}
	w.c.SetReadDeadline(time.Now().Add(d))
	if w.stopped.Load() { // an interrupt that raced with the deadline above
		return
	}
	n, err := w.c.Read(w.buf[:])
	switch {
	case n > 0:
		w.spurious++
	case err != nil && !errors.Is(err, os.ErrDeadlineExceeded):
		w.gone.Store(true)
	}
}

// throttle pauses before the next wait after many wake-ups that brought
// nothing (the goroutine sleeps in the runtime timer, no thread held).
func (w *ctlWaiter) throttle() {
	if w.spurious <= maxSpurious || w.stopped.Load() {
		return
	}
	pause := min(time.Millisecond<<min(w.spurious-maxSpurious, 7), maxThrottle)
	time.Sleep(pause)
}

// interrupt ends a wait in progress and every later one.
func (w *ctlWaiter) interrupt() {
	w.stopped.Store(true)
	w.c.SetReadDeadline(time.Unix(1, 0))
}
