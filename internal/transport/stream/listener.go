package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/framing"
	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/evloop"
)

// ListenerConfig describes one connection-oriented listener for
// ServeListener.
type ListenerConfig struct {
	Transport     string // "unix", "tcp": agg.transport of every record
	URL           string // the listener's URL: agg.listener
	Deps          transport.Deps
	OctetCounting bool
	// Setup, if set, runs in the accept goroutine for each connection,
	// before its first read: fd is the accepted socket (non-blocking,
	// close-on-exec; Setup must not close it) and peer the address accept
	// returned. It fills meta.Peer (while the peer is most likely still
	// alive) and sets socket options. meta.Prepare is called after it.
	Setup func(fd int, peer unix.Sockaddr, meta *record.Meta)
	// ReadCoalesce > 0 asks the event loop to pause this long after a
	// short read of one of this listener's connections (see package
	// evloop). The unix listener sets it from Options.ReadCoalesce; TCP
	// does not, because there it measured slower (docs/adr/).
	ReadCoalesce time.Duration
}

// server is the state of one ServeListener call.
type server struct {
	cfg       ListenerConfig
	d         transport.Deps
	group     *evloop.Group
	budget    *transport.ByteBudget
	maxRecord int
	maxBuf    int
	// adm is reserved for each connection before accept: a slot when
	// MaxConns is set, and its descriptor from Deps.FDs. While either is
	// short the accept loop does not accept, and new connections wait in
	// the kernel's backlog, their data intact (ADR 0017, ADR 0052).
	adm *transport.Admission

	mu       sync.Mutex
	conns    map[*conn]struct{}
	draining bool
	drainEnd time.Time
	wg       sync.WaitGroup
}

// ServeListener accepts connections on ln until ctx ends and serves them on
// the event loops of Deps.Loops (its own loop if nil): a connection costs a
// file descriptor and a small struct, not a thread or a read buffer. ln
// must be a *net.UnixListener or *net.TCPListener (a syscall.Conn).
//
// A connection is accepted only once what it needs is reserved: a slot
// when Options.MaxConns is set, and a file descriptor from Deps.FDs (which
// keeps a reserve for the rest of the daemon). While either is short it
// does not accept, so further clients wait in the listen backlog (or see
// connect fail once that is full) instead of being accepted and dropped;
// the time is counted in accept_paused_seconds_total. Connections are
// accepted with accept4 on the listener's descriptor and go to the event
// loop as they are: nothing after accept needs another descriptor. A
// connection that sends nothing for Options.IdleTimeout is closed.
//
// When ctx ends it stops accepting, accepts what is already waiting in the
// backlog (as descriptors free up, until the drain deadline, if they are
// short), shuts every connection down for reading (a unix stream peer's
// next write then fails with EPIPE), reads what the kernel holds for at
// most Options.DrainGrace, submits it, closes the connections and returns.
// It returns nil after a shutdown and an error if ln failed on its own.
func ServeListener(ctx context.Context, ln net.Listener, cfg ListenerConfig) error {
	lf, err := listenerFile(ln)
	if err != nil {
		ln.Close()
		return fmt.Errorf("%s: %w", cfg.URL, err)
	}
	defer lf.Close()
	rc, err := lf.SyscallConn()
	if err != nil {
		ln.Close()
		return fmt.Errorf("%s: %w", cfg.URL, err)
	}
	d := cfg.Deps
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	group := d.Loops
	if group == nil {
		g, err := evloop.NewGroup(1)
		if err != nil {
			return err
		}
		defer g.Close()
		group = g
	}
	budget := d.Partial
	if budget == nil {
		budget = transport.NewByteBudget(d.Opts.MaxPartialBytes)
	}
	maxRecord := d.Opts.MaxRecord
	if maxRecord <= 0 {
		maxRecord = transport.DefaultOptions().MaxRecord
	}
	srv := &server{
		cfg: cfg, d: d, group: group, budget: budget,
		maxRecord: maxRecord, maxBuf: maxRecord + framing.OctetHeaderMax + 1,
		conns: map[*conn]struct{}{},
		adm:   transport.ListenerAdmission(d, metrics.PauseMaxConns, metrics.PauseFDs),
	}
	stop := context.AfterFunc(ctx, func() {
		lf.SetDeadline(time.Unix(1, 0)) // wakes the accept; the backlog is accepted below
	})
	defer stop()

	var runErr error
	for srv.adm.Admit(ctx, 1) {
		fd, sa, err := accept(rc)
		if err != nil {
			srv.adm.Refund(1, true)
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, os.ErrClosed) || errors.Is(err, net.ErrClosed) {
				runErr = fmt.Errorf("%s accept: %w", cfg.URL, err)
				break
			}
			// EMFILE, ENFILE, ENOBUFS, ECONNABORTED...: nothing was
			// accepted and the listener itself is fine; pause (counted)
			// instead of spinning, and go on.
			if !srv.adm.Failed(ctx, err) {
				break
			}
			continue
		}
		srv.adm.Commit(1, fd)
		srv.start(fd, sa)
	}
	more := srv.acceptBacklog(rc)

	srv.mu.Lock()
	srv.draining = true
	srv.drainEnd = time.Now().Add(d.Opts.DrainGrace)
	drainEnd := srv.drainEnd
	for c := range srv.conns {
		c.loop.Do(c.startDrain)
	}
	srv.mu.Unlock()
	// Descriptors were short: accept the rest of the backlog as the
	// draining connections give theirs back, until the drain deadline.
	for more && time.Now().Before(drainEnd) {
		var freed <-chan struct{}
		if g := srv.adm.FDs(); g != nil {
			freed = g.Freed()
		}
		t := time.NewTimer(min(10*time.Millisecond, time.Until(drainEnd)))
		select {
		case <-freed:
		case <-t.C:
		}
		t.Stop()
		more = srv.acceptBacklog(rc)
	}
	if more {
		d.Log.Warn("connections still waiting in the listen backlog at the drain deadline are reset unread: file descriptors were short",
			"listener", cfg.URL)
	}
	ln.Close()
	lf.Close()
	srv.wg.Wait()
	srv.detachOutlets()
	return runErr
}

// listenerFile is a pollable duplicate of ln's descriptor, for accept:
// net's listeners give no RawConn.Read to wait for a connection with, an
// os.File of a non-blocking descriptor does. It is one descriptor per
// listener, for its lifetime; the socket stays open until both are closed.
func listenerFile(ln net.Listener) (*os.File, error) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("%T has no file descriptor", ln)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	if cerr := rc.Control(func(lfd uintptr) {
		fd, err = unix.FcntlInt(lfd, unix.F_DUPFD_CLOEXEC, 0)
	}); cerr != nil {
		return nil, cerr
	}
	if err != nil {
		return nil, fmt.Errorf("dup listener: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "listener"), nil
}

// accept takes one connection from the listener behind rc, waiting in the
// netpoller while there is none. The socket is the kernel's, as it is:
// not wrapped in a net.Conn and not duplicated, so accepting needs one
// descriptor, which accept4 takes before it takes the connection (at
// EMFILE the connection stays in the backlog). It fails with the
// listener's deadline error once the stop woke it.
func accept(rc syscall.RawConn) (int, unix.Sockaddr, error) {
	fd := -1
	var sa unix.Sockaddr
	var aerr error
	err := rc.Read(func(lfd uintptr) bool {
		for {
			fd, sa, aerr = unix.Accept4(int(lfd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			if aerr != unix.EINTR {
				return aerr != unix.EAGAIN
			}
		}
	})
	if err != nil {
		return -1, nil, err
	}
	if aerr != nil {
		return -1, nil, os.NewSyscallError("accept4", aerr)
	}
	return fd, sa, nil
}

// detachOutlets submits what the listener's outlets still hold and removes
// them from their loops. Connections close in the middle of a round, before
// the round hook submits their last records, so this waits for each loop.
func (s *server) detachOutlets() {
	for _, l := range s.group.Loops() {
		done := make(chan struct{})
		l.Do(func() {
			defer close(done)
			o, ok := l.Value(s, func() any { return nil }).(*outlet)
			l.DeleteValue(s)
			if !ok {
				return
			}
			o.submit()
			s.d.Memory().Add(metrics.MemReadBuffers, -int64(len(o.scratch)))
			o.unhook()
			l.Stop(o.idle)
			l.Stop(o.drain)
		})
		<-done
	}
}

// acceptBacklog accepts the connections that completed before the shutdown
// but were not accepted yet (the limit held them back, or they arrived just
// now), so what their clients wrote is read and drained like the rest
// instead of being reset with the listener. It may exceed MaxConns, never
// the descriptor reserve: it reports true when it stopped because
// descriptors were short, with connections perhaps still waiting.
func (s *server) acceptBacklog(rc syscall.RawConn) (short bool) {
	type pending struct {
		fd int
		sa unix.Sockaddr
	}
	var got []pending
	rc.Control(func(lfd uintptr) {
		for {
			if !s.adm.TakeFDs(1) {
				short = true
				return
			}
			fd, sa, err := unix.Accept4(int(lfd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			if err != nil {
				s.adm.Refund(1, false)
				switch err {
				case unix.EINTR, unix.ECONNABORTED:
					continue
				case unix.EMFILE, unix.ENFILE, unix.ENOMEM, unix.ENOBUFS:
					if g := s.adm.FDs(); g != nil {
						g.Exhausted()
					}
					short = true
				}
				return // EAGAIN: the backlog is empty
			}
			s.adm.Commit(1, fd)
			got = append(got, pending{fd, sa})
		}
	})
	for _, p := range got {
		s.startSlotless(p.fd, p.sa)
	}
	return short
}

// start sets a new connection up and hands it to a loop. It owns fd, one
// slot and one descriptor of the gate.
func (s *server) start(fd int, sa unix.Sockaddr) { s.startConn(fd, sa, true) }

// startSlotless starts a connection accepted from the backlog at shutdown,
// which holds no slot (the limit may be exceeded while draining).
func (s *server) startSlotless(fd int, sa unix.Sockaddr) { s.startConn(fd, sa, false) }

func (s *server) startConn(fd int, sa unix.Sockaddr, slot bool) {
	m := s.d.Metrics
	meta := record.Meta{Transport: s.cfg.Transport, Listener: s.cfg.URL}
	if s.cfg.Setup != nil {
		s.cfg.Setup(fd, sa, &meta)
	}
	meta.Prepare()
	cn := &conn{srv: s, fd: fd, meta: meta, slot: slot, first: true, frame: framing.Stream{MaxRecord: s.maxRecord, Octet: s.cfg.OctetCounting}}
	s.mu.Lock()
	s.conns[cn] = struct{}{}
	s.wg.Add(1)
	draining := s.draining
	s.mu.Unlock()
	if m != nil {
		m.Accepted.Inc()
		m.Conns.Inc()
	}
	cn.loop = s.group.Pick()
	cn.loop.Do(func() { cn.attach(draining) })
}

// done forgets a closed connection and frees its slot and descriptor.
func (s *server) done(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	if m := s.d.Metrics; m != nil {
		m.Conns.Dec()
	}
	s.adm.Release(1, c.slot)
	s.wg.Done()
}

// SetRcvBuf asks for a receive buffer of n bytes on socket fd: SO_RCVBUFFORCE
// first (root may exceed net.core.rmem_max), SO_RCVBUF if that is refused.
// It returns what the kernel granted (getsockopt SO_RCVBUF, which Linux
// reports doubled for its bookkeeping).
func SetRcvBuf(fd int, n int) (int, error) {
	err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n)
	if err != nil {
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, n)
	}
	got, gerr := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err == nil {
		err = gerr
	}
	if err != nil {
		return got, fmt.Errorf("set receive buffer to %d: %w", n, err)
	}
	return got, nil
}
