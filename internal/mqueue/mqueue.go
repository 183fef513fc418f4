// Package mqueue wraps the Linux POSIX message queue system calls
// (mq_open, mq_timedsend, mq_timedreceive, mq_getsetattr, mq_unlink)
// without cgo, and reads the kernel's queue limits.
//
// On Linux a queue descriptor is a file descriptor, so it can be closed
// with close(2) and waited on with epoll: a non-blocking queue works with
// Go's poller (see Queue.File). Names are given with or without the
// leading '/' and must be a single path component.
package mqueue

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Attr mirrors struct mq_attr.
type Attr struct {
	Flags   int64 // 0 or O_NONBLOCK
	MaxMsg  int64 // queue capacity in messages
	MsgSize int64 // largest message in bytes
	CurMsgs int64 // messages queued now
	_       [4]int64
}

// Limits are the kernel's settings under /proc/sys/fs/mqueue.
type Limits struct {
	MsgMax         int // fs.mqueue.msg_max: largest mq_maxmsg an unprivileged opener may ask for
	MsgSizeMax     int // fs.mqueue.msgsize_max: largest mq_msgsize likewise
	MsgDefault     int // fs.mqueue.msg_default: mq_maxmsg when no attr is given
	MsgSizeDefault int
	QueuesMax      int
}

// ReadLimits reads /proc/sys/fs/mqueue.
func ReadLimits() (Limits, error) {
	var l Limits
	for _, f := range []struct {
		name string
		dst  *int
	}{{"msg_max", &l.MsgMax}, {"msgsize_max", &l.MsgSizeMax}, {"msg_default", &l.MsgDefault},
		{"msgsize_default", &l.MsgSizeDefault}, {"queues_max", &l.QueuesMax}} {
		b, err := os.ReadFile("/proc/sys/fs/mqueue/" + f.name)
		if err != nil {
			return l, fmt.Errorf("mqueue: read limits: %w", err)
		}
		if *f.dst, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			return l, fmt.Errorf("mqueue: parse %s: %w", f.name, err)
		}
	}
	return l, nil
}

// ErrBadName is returned for a queue name that is empty, too long or has a '/'.
var ErrBadName = errors.New("mqueue: bad queue name")

// Queue is an open message queue descriptor.
type Queue struct {
	fd   int
	name string
}

func sysName(name string) (*byte, error) {
	n := strings.TrimPrefix(name, "/")
	if n == "" || len(n) > 255 || strings.ContainsAny(n, "/\x00") {
		return nil, fmt.Errorf("%w: %q", ErrBadName, name)
	}
	return unix.BytePtrFromString(n) // the syscall takes the name without '/'
}

// Open opens (flags O_CREAT etc.) the queue name. attr is used only when
// the queue is created; nil means the kernel defaults.
func Open(name string, flags int, mode uint32, attr *Attr) (*Queue, error) {
	p, err := sysName(name)
	if err != nil {
		return nil, err
	}
	fd, _, errno := unix.Syscall6(unix.SYS_MQ_OPEN, uintptr(unsafe.Pointer(p)), uintptr(flags|unix.O_CLOEXEC),
		uintptr(mode), uintptr(unsafe.Pointer(attr)), 0, 0)
	if errno != 0 {
		return nil, &os.PathError{Op: "mq_open", Path: "/" + strings.TrimPrefix(name, "/"), Err: errno}
	}
	return &Queue{fd: int(fd), name: "/" + strings.TrimPrefix(name, "/")}, nil
}

// Unlink removes the queue name; open descriptors keep working.
func Unlink(name string) error {
	p, err := sysName(name)
	if err != nil {
		return err
	}
	if _, _, errno := unix.Syscall(unix.SYS_MQ_UNLINK, uintptr(unsafe.Pointer(p)), 0, 0); errno != 0 {
		return &os.PathError{Op: "mq_unlink", Path: name, Err: errno}
	}
	return nil
}

// FD is the queue descriptor.
func (q *Queue) FD() int { return q.fd }

// Name is the queue name with its leading '/'.
func (q *Queue) Name() string { return q.name }

// Attr returns the queue's current attributes.
func (q *Queue) Attr() (Attr, error) {
	var a Attr
	if _, _, errno := unix.Syscall(unix.SYS_MQ_GETSETATTR, uintptr(q.fd), 0, uintptr(unsafe.Pointer(&a))); errno != 0 {
		return a, fmt.Errorf("mq_getsetattr %s: %w", q.name, errno)
	}
	return a, nil
}

// deadline converts d to the absolute CLOCK_REALTIME time the syscalls
// want; nil (wait forever) for d < 0.
func deadline(d time.Duration) *unix.Timespec {
	if d < 0 {
		return nil
	}
	ts, _ := unix.TimeToTimespec(time.Now().Add(d))
	return &ts
}

// Send queues msg. On a blocking descriptor it waits while the queue is
// full (d < 0: without limit); EAGAIN on a non-blocking one, ETIMEDOUT
// after d. EMSGSIZE means msg is longer than the queue's MsgSize.
func (q *Queue) Send(msg []byte, prio uint, d time.Duration) error {
	var p unsafe.Pointer
	if len(msg) > 0 {
		p = unsafe.Pointer(&msg[0])
	}
	ts := deadline(d)
	for {
		_, _, errno := unix.Syscall6(unix.SYS_MQ_TIMEDSEND, uintptr(q.fd), uintptr(p), uintptr(len(msg)), uintptr(prio), uintptr(unsafe.Pointer(ts)), 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return errno
		}
		return nil
	}
}

// Receive takes the oldest highest-priority message into buf, which must
// hold MsgSize bytes (EMSGSIZE otherwise), and returns its length. On a
// non-blocking descriptor an empty queue is EAGAIN.
func (q *Queue) Receive(buf []byte, d time.Duration) (int, error) {
	var p unsafe.Pointer
	if len(buf) > 0 {
		p = unsafe.Pointer(&buf[0])
	}
	ts := deadline(d)
	for {
		n, _, errno := unix.Syscall6(unix.SYS_MQ_TIMEDRECEIVE, uintptr(q.fd), uintptr(p), uintptr(len(buf)), 0, uintptr(unsafe.Pointer(ts)), 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		return int(n), nil
	}
}

// Close closes the descriptor.
func (q *Queue) Close() error {
	if q.fd < 0 {
		return nil
	}
	err := unix.Close(q.fd)
	q.fd = -1
	return err
}

// File hands the descriptor to an *os.File (registered with Go's poller
// when the queue is non-blocking) and forgets it: close the File, not q.
func (q *Queue) File() *os.File {
	f := os.NewFile(uintptr(q.fd), "mqueue:"+q.name)
	q.fd = -1
	return f
}

// ReceiveFD is Receive without a deadline on a raw descriptor, for callers
// that handed the descriptor to an *os.File (see File): inside
// SyscallConn().Read or Control.
func ReceiveFD(fd int, buf []byte) (int, error) {
	q := Queue{fd: fd}
	return q.Receive(buf, -1)
}

// AttrFD is Attr on a raw descriptor.
func AttrFD(fd int) (Attr, error) {
	q := Queue{fd: fd}
	return q.Attr()
}
