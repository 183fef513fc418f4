package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/transport"
)

// ListenerConfig describes one connection-oriented listener for
// ServeListener.
type ListenerConfig struct {
	Transport     string // "unix", "tcp": agg.transport of every record
	URL           string // the listener's URL: agg.listener
	Deps          transport.Deps
	OctetCounting bool
	// Setup, if set, runs in each connection's goroutine before reading:
	// it fills meta.Peer and sets socket options. meta.Prepare is called
	// after it.
	Setup func(c net.Conn, meta *record.Meta)
	// ReadCoalesce > 0 detaches each connection from the netpoller and
	// pauses this long after a short read (see detached.go). The unix
	// listener sets it from Options.ReadCoalesce; TCP does not, because
	// there it measured slower (see docs/DECISIONS.md).
	ReadCoalesce time.Duration
}

// ServeListener accepts connections on ln until ctx ends and serves each in
// its own goroutine with a Reader. Connections beyond Options.MaxConns are
// accepted and closed at once, counted as dropped (conn_limit). A connection
// that sends nothing for Options.IdleTimeout is closed.
//
// When ctx ends it closes ln, gives every open connection Options.DrainGrace
// to deliver what is already buffered (connections that reach EOF earlier
// finish earlier), waits for all connection goroutines and returns. It
// returns nil after a shutdown and an error if ln failed on its own.
func ServeListener(ctx context.Context, ln net.Listener, cfg ListenerConfig) error {
	d := cfg.Deps
	m := d.Metrics
	var (
		mu    sync.Mutex
		conns = map[*conn]struct{}{}
		wg    sync.WaitGroup
	)
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()

	var runErr error
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
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
		mu.Lock()
		if d.Opts.MaxConns > 0 && len(conns) >= d.Opts.MaxConns {
			mu.Unlock()
			// Count before closing: whoever sees the close may look at the
			// counter next.
			if m != nil {
				m.Drop(metrics.CauseConnLimit, 1)
			}
			c.Close()
			continue
		}
		cs := newConn(c, d.Opts.IdleTimeout)
		conns[cs] = struct{}{}
		wg.Add(1)
		mu.Unlock()
		if m != nil {
			m.Accepted.Inc()
			m.Conns.Inc()
		}
		go func() {
			defer wg.Done()
			serveConn(cs, cfg)
			mu.Lock()
			delete(conns, cs)
			mu.Unlock()
			if m != nil {
				m.Conns.Dec()
			}
		}()
	}
	ln.Close()

	// The accept loop is over, so the set of connections only shrinks now.
	mu.Lock()
	for cs := range conns {
		cs.startDrain(d.Opts.DrainGrace)
	}
	mu.Unlock()
	wg.Wait()
	return runErr
}

func serveConn(cs *conn, cfg ListenerConfig) {
	defer cs.Close()
	meta := &record.Meta{Transport: cfg.Transport, Listener: cfg.URL}
	if cfg.Setup != nil {
		cfg.Setup(cs.Conn, meta)
	}
	if cfg.ReadCoalesce > 0 {
		cs.detach(cfg.ReadCoalesce)
	}
	meta.Prepare()
	err := Serve(cs, meta, cfg.Deps, cfg.OctetCounting)
	if err != nil && !IsEndOfConn(err) && cfg.Deps.Log != nil {
		cfg.Deps.Log.Debug("connection ended", "listener", cfg.URL, "err", err)
	}
}

// IsEndOfConn reports whether err is an ordinary end of a connection: a
// deadline (idle timeout or drain), a reset by the peer, or a closed
// connection.
func IsEndOfConn(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// conn wraps a connection so the idle deadline is pushed forward before
// every read, except once the drain started: the drain deadline then wins.
// A conn may be detached from the netpoller (see detached.go); fd is then
// the socket and Conn is closed.
type conn struct {
	net.Conn
	idle     time.Duration
	mu       sync.Mutex
	drainEnd time.Time // set once the drain started
	closed   bool
	// Detached connections only; used by the reading goroutine alone.
	fd       int // -1 while on the netpoller
	coalesce time.Duration
	lastRead int
	pollFd   [1]unix.PollFd
}

// draining reports whether the drain started; c.mu must be held.
func (c *conn) draining() bool { return !c.drainEnd.IsZero() }

func newConn(c net.Conn, idle time.Duration) *conn { return &conn{Conn: c, idle: idle, fd: -1} }

func (c *conn) Read(p []byte) (int, error) {
	if c.fd >= 0 {
		return c.readDetached(p)
	}
	if c.idle > 0 {
		c.mu.Lock()
		if !c.draining() {
			c.Conn.SetReadDeadline(time.Now().Add(c.idle))
		}
		c.mu.Unlock()
	}
	return c.Conn.Read(p)
}

// Close closes the connection once; a concurrent startDrain then leaves
// the (possibly reused) descriptor alone.
func (c *conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.fd >= 0 {
		return unix.Close(c.fd)
	}
	return c.Conn.Close()
}

// startDrain shuts the read side down, then lets the reader collect what
// the kernel already holds, bounded by grace. On a unix stream socket
// shutdown(SHUT_RD) makes the peer's next write fail with EPIPE, so every
// write that succeeded is read before EOF and none vanishes; on TCP it makes
// reads return EOF as soon as the queue is empty instead of waiting out the
// grace period. It also wakes a detached reader blocked in poll.
func (c *conn) startDrain(grace time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drainEnd = time.Now().Add(grace)
	if c.closed {
		return
	}
	if c.fd >= 0 {
		unix.Shutdown(c.fd, unix.SHUT_RD)
		return
	}
	if cr, ok := c.Conn.(interface{ CloseRead() error }); ok {
		cr.CloseRead()
	}
	c.Conn.SetReadDeadline(c.drainEnd)
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
