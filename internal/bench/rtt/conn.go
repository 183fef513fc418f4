package rtt

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// conn is one side of a ping-pong channel. send and recv move exactly
// len(p) bytes as one message; both block. Implementations keep their hot
// path free of allocations.
type conn interface {
	send(p []byte) error
	recv(p []byte) error
	close()
}

// errShortMessage means a datagram arrived with the wrong length.
var errShortMessage = errors.New("short message")

// sysRead and sysWrite are read(2) and write(2). With raw set they use
// unix.RawSyscall, which skips the runtime's entersyscall/exitsyscall.
//
// Why that matters (measured on the 2-vCPU VM, pinned cross-core, 30000
// round trips; see the package doc): with unix.Read a thread blocked more
// than 20 µs in a syscall has its P retaken by sysmon, which then keeps
// waking every 20 µs, and exitsyscall must reacquire a P. The Go pipe row
// came out 1.16-1.28x the C median with ~30x C's involuntary context
// switches; with raw syscalls it is 0.93-1.02x with C-like switch counts.
//
// The price: the runtime believes the goroutine is running, so a
// stop-the-world waits for the call to return. Every raw blocking call here
// is therefore bounded: stream fds see EOF when the peer dies, datagram
// sockets carry SO_RCVTIMEO (recvTimeout), mq receives use a deadline, and
// futex waits a timeout; a timed-out call re-checks the abort flag.
func sysRead(fd int, p []byte, raw bool) (int, error) {
	if !raw {
		return unix.Read(fd, p)
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

func sysWrite(fd int, p []byte, raw bool) (int, error) {
	if !raw {
		return unix.Write(fd, p)
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

// recvTimeout bounds one blocking datagram receive so a dead peer is
// noticed (see sysRead); a healthy ping-pong never waits this long.
const recvTimeout = time.Second

// streamConn is a byte stream over one or two blocking fds (pipe, fifo,
// unix stream, tcp): messages may be split, so both directions loop.
type streamConn struct {
	r, w int
	raw  bool
}

func (c *streamConn) send(p []byte) error {
	for len(p) > 0 {
		n, err := sysWrite(c.w, p, c.raw)
		if err != nil {
			if err == unix.EINTR { //nolint:errorlint // a raw errno, never wrapped, on the measured path
				continue
			}
			return fmt.Errorf("write: %w", err)
		}
		p = p[n:]
	}
	return nil
}

func (c *streamConn) recv(p []byte) error {
	for len(p) > 0 {
		n, err := sysRead(c.r, p, c.raw)
		if err != nil {
			if err == unix.EINTR { //nolint:errorlint // a raw errno, never wrapped, on the measured path
				continue
			}
			return fmt.Errorf("read: %w", err)
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		p = p[n:]
	}
	return nil
}

func (c *streamConn) close() {
	unix.Close(c.r)
	if c.w != c.r {
		unix.Close(c.w)
	}
}

// dgramConn is one connected datagram socket (unixgram socketpair, udp):
// one message per call.
type dgramConn struct {
	fd    int
	raw   bool
	abort *atomic.Bool // nil on the echo side, which Pdeathsig kills instead
}

// setRecvTimeout arms SO_RCVTIMEO so a raw blocking recv returns EAGAIN.
func setRecvTimeout(fd int) error {
	tv := unix.NsecToTimeval(int64(recvTimeout))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("SO_RCVTIMEO: %w", err)
	}
	return nil
}

func (c *dgramConn) send(p []byte) error {
	for {
		n, err := sysWrite(c.fd, p, c.raw)
		if err == unix.EINTR { //nolint:errorlint // a raw errno, never wrapped, on the measured path
			continue
		}
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
		if n != len(p) {
			return fmt.Errorf("send %d of %d: %w", n, len(p), errShortMessage)
		}
		return nil
	}
}

func (c *dgramConn) recv(p []byte) error {
	for {
		n, err := sysRead(c.fd, p, c.raw)
		if err == unix.EINTR { //nolint:errorlint // a raw errno, never wrapped, on the measured path
			continue
		}
		if err == unix.EAGAIN { //nolint:errorlint // a raw errno, never wrapped, on the measured path
			if c.abort != nil && c.abort.Load() {
				return io.ErrUnexpectedEOF
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("recv: %w", err)
		}
		if n != len(p) {
			if n == 0 {
				return io.ErrUnexpectedEOF
			}
			return fmt.Errorf("recv %d of %d: %w", n, len(p), errShortMessage)
		}
		return nil
	}
}

func (c *dgramConn) close() { unix.Close(c.fd) }
