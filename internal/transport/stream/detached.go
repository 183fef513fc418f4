package stream

import (
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ipclab/logagg/internal/transport"
	"golang.org/x/sys/unix"
)

// Read coalescing.
//
// A stream socket read through Go's netpoller wakes the aggregator for
// every write a producer makes while the aggregator is idle, and the
// producer pays for that wake-up inside write(2): on this VM a wake-up of an
// idle vCPU costs tens of µs, so a fast reader makes a one-write-per-record
// producer slower (the producer reached 400k records/s into a netpoll reader
// that discards everything, 530k into one that pauses 100 µs between short
// reads; reads fell from one per 2.6 records to one per 160).
//
// So a connection served with ListenerConfig.ReadCoalesce > 0 is detached
// from the netpoller (its fd is duplicated and the net.Conn closed, which
// removes it from Go's epoll set) and read by its goroutine with plain
// syscalls: after
// a read shorter than coalesceBelow it sleeps ReadCoalesce, while the
// producer's writes queue in the socket without waking anybody; when the
// socket is empty it blocks in poll(2). Each connection then holds an OS
// thread while it waits, which is why it is a per-listener option and
// --max-conns bounds it.
//
// Only unix stream listeners use it. Over loopback TCP the same pause made
// producers slower, not faster (4 producers: 2.1-2.7 M records in 3 s
// without, 1.6-1.8 M with; 1 producer 0.76-0.82 M against 0.60 M), while
// on unix stream sockets it took one producer from 0.85-1.06 M to
// 1.37-1.41 M and left four about even (1.63-1.77 M against 1.69-1.78 M).

// coalesceBelow: a read at least this long means the producer is ahead of
// us; read again at once.
const coalesceBelow = 32 << 10

// maxPollWait bounds a poll so a drain that started while the reader was
// blocked is noticed even if shutdown(2) did not wake it.
const maxPollWait = time.Second

// detachedReads counts recvfrom calls on detached connections that
// returned data, for tests (see export_test.go).
var detachedReads atomic.Int64

// detach moves c off the netpoller; it reports false (and c keeps using the
// net.Conn) where the connection exposes no file descriptor.
func (c *conn) detach(coalesce time.Duration) bool {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	fd := -1
	if cerr := rc.Control(func(f uintptr) {
		fd, err = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0)
	}); cerr != nil || err != nil {
		return false
	}
	// Closing the original fd takes it out of the netpoller; the socket
	// lives on in fd, still non-blocking (the flag belongs to the open
	// file, which both fds share).
	c.mu.Lock() // startDrain and Close read fd from other goroutines
	defer c.mu.Unlock()
	if c.closed {
		unix.Close(fd)
		return false
	}
	c.Conn.Close()
	c.fd = fd
	c.coalesce = coalesce
	return true
}

// readDetached is Read for a detached connection: the same results as a
// net.Conn read (data, io.EOF, os.ErrDeadlineExceeded at the idle or drain
// deadline, or the socket error).
func (c *conn) readDetached(p []byte) (int, error) {
	c.mu.Lock()
	draining := c.draining()
	c.mu.Unlock()
	if !draining && c.coalesce > 0 && c.lastRead > 0 && c.lastRead < coalesceBelow {
		transport.CoalescePause(c.coalesce)
	}
	var idleEnd time.Time // set when this read first has to wait
	for {
		n, _, err := unix.Recvfrom(c.fd, p, unix.MSG_DONTWAIT)
		switch {
		case err == nil && n > 0:
			c.lastRead = n
			detachedReads.Add(1)
			return n, nil
		case err == nil:
			if len(p) == 0 {
				return 0, nil
			}
			return 0, io.EOF
		case err == unix.EINTR:
			continue
		case err != unix.EAGAIN:
			return 0, os.NewSyscallError("recvfrom", err)
		}
		c.lastRead = 0
		if c.idle > 0 && idleEnd.IsZero() {
			idleEnd = time.Now().Add(c.idle)
		}
		c.mu.Lock()
		deadline := idleEnd
		if c.draining() {
			deadline = c.drainEnd
		}
		c.mu.Unlock()
		wait := maxPollWait
		if !deadline.IsZero() {
			wait = min(wait, time.Until(deadline))
			if wait <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
		}
		ms := int((wait + time.Millisecond - 1) / time.Millisecond)
		c.pollFd[0] = unix.PollFd{Fd: int32(c.fd), Events: unix.POLLIN | unix.POLLRDHUP}
		if _, err := unix.Poll(c.pollFd[:], ms); err != nil && err != unix.EINTR {
			return 0, os.NewSyscallError("poll", err)
		}
	}
}
