package rawchan

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Errors Recv and Send return unwrapped, for errors.Is.
var (
	// ErrClosed: the peer closed the channel (read returned 0).
	ErrClosed = errors.New("peer closed")
	// ErrStopped: a receive found nothing and IO.Stop said to give up.
	ErrStopped = errors.New("no message before the deadline")
	// ErrShortMessage: a datagram was sent or arrived with the wrong length.
	ErrShortMessage = errors.New("short message")
)

// IO moves whole messages over one descriptor. The zero value is a
// stream with Go's syscalls and no way out of an empty wait but the
// peer's close.
type IO struct {
	// Dgram: one message per call, its boundaries kept by the kernel. A
	// stream loops until the whole message has moved.
	Dgram bool
	// Raw uses unix.RawSyscall for read and write, skipping the runtime's
	// entersyscall/exitsyscall.
	//
	// Why that matters (measured on the 2-vCPU VM, pinned cross-core,
	// 30000 round trips): with unix.Read a thread blocked more than 20 µs
	// in a syscall has its P retaken by sysmon, which then keeps waking
	// every 20 µs, and exitsyscall must reacquire a P. The Go pipe row came
	// out 1.16-1.28x the C median with ~30x C's involuntary context
	// switches; with raw syscalls it is 0.93-1.02x with C-like counts.
	//
	// The price: the runtime believes the goroutine is running, so a
	// stop-the-world waits for the call to return. A raw blocking call must
	// therefore be bounded: stream fds see EOF when the peer dies, and
	// datagram sockets carry SO_RCVTIMEO (SetRecvTimeout), so a receive
	// returns EAGAIN (or EINTR, when the runtime's preemption signal
	// interrupts it first) now and then and consults Stop.
	Raw bool
	// Stop is asked when a receive finds nothing (EAGAIN: a non-blocking
	// descriptor, or SO_RCVTIMEO expired); true makes Recv return
	// ErrStopped. Nil waits on.
	Stop func() bool
}

// waitStep bounds one poll of a non-blocking descriptor, so Stop is
// consulted at least this often (milliseconds).
const waitStep = 100

func (o IO) read(fd int, p []byte) (int, error) {
	if !o.Raw {
		return unix.Read(fd, p)
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

func (o IO) write(fd int, p []byte) (int, error) {
	if !o.Raw {
		return unix.Write(fd, p)
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

// wait polls fd for events for at most waitStep; an error other than
// EINTR is returned.
func wait(fd int, events int16) error {
	if _, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: events}}, waitStep); err != nil && err != unix.EINTR { //nolint:errorlint // a raw errno
		return fmt.Errorf("poll: %w", err)
	}
	return nil
}

// Send writes p as one message, waiting for room when fd is non-blocking.
// It allocates nothing.
func (o IO) Send(fd int, p []byte) error {
	for len(p) > 0 {
		n, err := o.write(fd, p)
		switch {
		case err == unix.EINTR: //nolint:errorlint // a raw errno, never wrapped, on the measured path
			continue
		case err == unix.EAGAIN: //nolint:errorlint // a raw errno, never wrapped, on the measured path
			if err := wait(fd, unix.POLLOUT); err != nil {
				return err
			}
			continue
		case err != nil:
			return fmt.Errorf("write: %w", err)
		}
		if o.Dgram {
			if n != len(p) {
				return fmt.Errorf("send %d of %d: %w", n, len(p), ErrShortMessage)
			}
			return nil
		}
		p = p[n:]
	}
	return nil
}

// Recv reads one message into p: exactly len(p) bytes from a stream, or
// one datagram that must be len(p) long. It allocates nothing.
func (o IO) Recv(fd int, p []byte) error {
	got := 0
	for got < len(p) {
		n, err := o.read(fd, p[got:])
		switch {
		case err == unix.EINTR: //nolint:errorlint // a raw errno, never wrapped, on the measured path
			// A raw receive looks to the runtime like a goroutine that
			// never stops running, so sysmon signals it every 10 ms to
			// preempt it; a socket receive with SO_RCVTIMEO is not
			// restarted after a signal but fails with EINTR and starts its
			// timeout again, so it would never expire. Ask Stop here too,
			// or a datagram lost at the end of a run hangs the receiver.
			if o.Stop != nil && o.Stop() {
				return ErrStopped
			}
			continue
		case err == unix.EAGAIN: //nolint:errorlint // a raw errno, never wrapped, on the measured path
			if o.Stop != nil && o.Stop() {
				return ErrStopped
			}
			if err := wait(fd, unix.POLLIN); err != nil {
				return err
			}
			continue
		case err != nil:
			return fmt.Errorf("read: %w", err)
		case n == 0:
			return ErrClosed
		}
		if o.Dgram {
			if n != len(p) {
				return fmt.Errorf("recv %d of %d: %w", n, len(p), ErrShortMessage)
			}
			return nil
		}
		got += n
	}
	return nil
}

// RecvTimeout bounds one blocking datagram receive so a dead peer is
// noticed (see IO.Raw); a healthy ping-pong never waits this long.
const RecvTimeout = time.Second

// SetRecvTimeout arms SO_RCVTIMEO (RecvTimeout) on a datagram socket so a
// blocking receive returns EAGAIN and consults IO.Stop.
func SetRecvTimeout(fd int) error {
	tv := unix.NsecToTimeval(int64(RecvTimeout))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("SO_RCVTIMEO: %w", err)
	}
	return nil
}
