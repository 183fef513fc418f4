package dgram

import (
	"errors"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// detachedRaw holds a socket taken off Go's netpoller, to be served by an
// event loop instead. On this VM a datagram arriving for a netpoll reader
// wakes the netpoller thread, which then wakes the reading goroutine's
// thread; a loop waiting in epoll_wait(2) on its own thread makes it one
// wake-up, and the sender's sendto pays less for it. A reader that discards
// everything took 210-220k UDP datagrams/s from one producer waiting in
// poll(2) that way against 175-185k through the netpoller, and 430k unix
// datagrams/s against 290-360k.
//
// It implements the Control part of syscall.RawConn, which the drain and
// setup use; reading happens on the loop (Receiver.Ready).
type detachedRaw struct {
	fd int

	mu     sync.Mutex
	closed bool
}

// detach duplicates the socket of raw and closes c, which takes the socket
// off the netpoller; the duplicate keeps it open.
func detach(raw syscall.RawConn, c Conn) (*detachedRaw, error) {
	fd := -1
	var derr error
	if err := raw.Control(func(f uintptr) { fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	c.Close()
	return &detachedRaw{fd: fd}, nil
}

// Control implements syscall.RawConn.
func (d *detachedRaw) Control(f func(fd uintptr)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return os.ErrClosed
	}
	f(uintptr(d.fd))
	return nil
}

// Read implements syscall.RawConn; a detached socket is read by its loop.
func (d *detachedRaw) Read(func(fd uintptr) bool) error { return errors.ErrUnsupported }

// Write implements syscall.RawConn; receivers never write.
func (d *detachedRaw) Write(func(fd uintptr) bool) error { return errors.ErrUnsupported }

func (d *detachedRaw) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	return unix.Close(d.fd)
}
