package stream

import (
	"context"
	"errors"
	"fmt"
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
	// before its first read: it fills meta.Peer (while the peer is most
	// likely still alive) and sets socket options. meta.Prepare is called
	// after it.
	Setup func(c net.Conn, meta *record.Meta)
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
	// slots holds a token per open connection when MaxConns is set: at
	// the limit the accept loop stops accepting, and new connections wait
	// in the kernel's backlog, their data intact, until one closes.
	slots chan struct{}

	mu       sync.Mutex
	conns    map[*conn]struct{}
	draining bool
	drainEnd time.Time
	wg       sync.WaitGroup
}

// ServeListener accepts connections on ln until ctx ends and serves them on
// the event loops of Deps.Loops (its own loop if nil): a connection costs a
// file descriptor and a small struct, not a thread or a read buffer.
//
// With Options.MaxConns set, at most that many connections are open: at
// the limit it stops accepting, so further clients wait in the listen
// backlog (or see connect fail once that is full) instead of being
// accepted and dropped. A connection that sends nothing for
// Options.IdleTimeout is closed.
//
// When ctx ends it stops accepting, accepts what is already waiting in the
// backlog, shuts every connection down for reading (a unix stream peer's
// next write then fails with EPIPE), reads what the kernel holds for at
// most Options.DrainGrace, submits it, closes the connections and returns.
// It returns nil after a shutdown and an error if ln failed on its own.
func ServeListener(ctx context.Context, ln net.Listener, cfg ListenerConfig) error {
	d := cfg.Deps
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
	}
	if d.Opts.MaxConns > 0 {
		srv.slots = make(chan struct{}, d.Opts.MaxConns)
	}
	dl, _ := ln.(interface{ SetDeadline(time.Time) error })
	stop := context.AfterFunc(ctx, func() {
		if dl != nil {
			dl.SetDeadline(time.Unix(1, 0)) // wakes Accept; the backlog is accepted below
		} else {
			ln.Close()
		}
	})
	defer stop()

	var runErr error
	var backoff time.Duration
	for srv.acquire(ctx) {
		c, err := ln.Accept()
		if err != nil {
			srv.release()
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, net.ErrClosed) {
				runErr = fmt.Errorf("%s accept: %w", cfg.URL, err)
				break
			}
			// EMFILE, ENFILE, ENOBUFS, ECONNABORTED...: the listener
			// itself is fine; back off instead of spinning, and go on.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			d.Log.Warn("accept failed, retrying", "listener", cfg.URL, "err", err, "backoff", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			continue
		}
		backoff = 0
		srv.start(c)
	}
	srv.acceptBacklog(ln)
	ln.Close()

	srv.mu.Lock()
	srv.draining = true
	srv.drainEnd = time.Now().Add(d.Opts.DrainGrace)
	for c := range srv.conns {
		c.loop.Do(c.startDrain)
	}
	srv.mu.Unlock()
	srv.wg.Wait()
	srv.detachOutlets()
	return runErr
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

// acquire takes a connection slot and the connection's share of the
// connections' memory (Deps.Conns), waiting while every slot is taken or
// the memory spent; it reports false once ctx ended.
func (s *server) acquire(ctx context.Context) bool {
	if s.slots != nil {
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			return false
		}
	}
	if ctx.Err() != nil || !s.d.TakeConn(ctx.Done(), transport.ConnCost) {
		if s.slots != nil {
			<-s.slots
		}
		return false
	}
	return true
}

func (s *server) release() {
	s.d.GiveConn(transport.ConnCost)
	if s.slots != nil {
		<-s.slots
	}
}

// acceptBacklog accepts the connections that completed before the shutdown
// but were not accepted yet (the limit held them back, or they arrived just
// now), so what their clients wrote is read and drained like the rest
// instead of being reset with the listener. It may exceed MaxConns.
func (s *server) acceptBacklog(ln net.Listener) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	var fds []int
	rc.Control(func(lfd uintptr) {
		for {
			fd, _, err := unix.Accept4(int(lfd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			if err != nil {
				return // EAGAIN: the backlog is empty
			}
			fds = append(fds, fd)
		}
	})
	for _, fd := range fds {
		f := os.NewFile(uintptr(fd), "backlog")
		c, err := net.FileConn(f) // dups fd
		f.Close()
		if err != nil {
			continue
		}
		s.startSlotless(c)
	}
}

// start sets a new connection up and hands it to a loop. It owns c and
// one slot.
func (s *server) start(c net.Conn) { s.startConn(c, true) }

// startSlotless starts a connection accepted from the backlog at shutdown,
// which holds no slot (the limit may be exceeded while draining).
func (s *server) startSlotless(c net.Conn) { s.startConn(c, false) }

func (s *server) startConn(c net.Conn, slot bool) {
	m := s.d.Metrics
	meta := record.Meta{Transport: s.cfg.Transport, Listener: s.cfg.URL}
	if s.cfg.Setup != nil {
		s.cfg.Setup(c, &meta)
	}
	meta.Prepare()
	fd, err := detachFD(c)
	if err != nil {
		c.Close()
		if slot {
			s.release()
		}
		s.d.Log.Warn("connection setup failed", "listener", s.cfg.URL, "err", err)
		return
	}
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

// done forgets a closed connection and frees its slot.
func (s *server) done(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	if m := s.d.Metrics; m != nil {
		m.Conns.Dec()
	}
	if c.slot {
		s.release()
	}
	s.wg.Done()
}

// detachFD takes c's socket out of Go's netpoller: the fd is duplicated and
// c closed, which removes it from Go's epoll set. The duplicate shares the
// open file, so it stays non-blocking.
func detachFD(c net.Conn) (int, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, fmt.Errorf("%T has no file descriptor", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if cerr := rc.Control(func(f uintptr) {
		fd, err = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0)
	}); cerr != nil {
		return -1, cerr
	}
	if err != nil {
		return -1, fmt.Errorf("dup: %w", err)
	}
	c.Close()
	return fd, nil
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
