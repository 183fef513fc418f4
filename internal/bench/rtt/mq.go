package rtt

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// POSIX message queues through raw syscalls: x/sys/unix has the numbers but
// no wrappers. mqd_t is a file descriptor on Linux, so a queue can be passed
// to the child like any other fd.

// mqAttr is struct mq_attr (four longs and padding).
type mqAttr struct {
	Flags, Maxmsg, Msgsize, Curmsgs int64
	_                               [4]int64
}

// errMqLimit says a size is above fs.mqueue.msgsize_max.
var errMqLimit = errors.New("payload above fs.mqueue.msgsize_max")

var mqSeq atomic.Int64

// mqCreate creates an anonymous-ish queue (unique name, unlinked right
// away: the fd keeps it alive and nothing is left behind in /dev/mqueue).
func mqCreate(msgsize int) (int, error) {
	if lim, err := readProcInt("/proc/sys/fs/mqueue/msgsize_max"); err == nil && lim > 0 && int64(msgsize) > lim {
		return -1, fmt.Errorf("mq_open msgsize %d > %d: %w", msgsize, lim, errMqLimit)
	}
	// The kernel takes the name without glibc's leading slash.
	name := "ipcbench-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(mqSeq.Add(1), 10)
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	attr := mqAttr{Maxmsg: 1, Msgsize: int64(msgsize)}
	fd, _, e := unix.Syscall6(unix.SYS_MQ_OPEN, uintptr(unsafe.Pointer(p)),
		uintptr(unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC), 0o600, uintptr(unsafe.Pointer(&attr)), 0, 0)
	if e != 0 {
		return -1, fmt.Errorf("mq_open %s: %w", name, e)
	}
	unix.Syscall(unix.SYS_MQ_UNLINK, uintptr(unsafe.Pointer(p)), 0, 0)
	return int(fd), nil
}

// mqConn sends on one queue and receives on another.
type mqConn struct {
	tx, rx   int
	abort    *atomic.Bool // set by the watchdog when the peer exited
	raw      bool         // raw syscalls; receives then carry a deadline (see rawchan.IO.Raw)
	calls    int
	prio     uint32        // priority of the last message; poison uses 1
	deadline unix.Timespec // CLOCK_REALTIME, refreshed every 256 receives
}

// mqWait bounds one raw receive; a healthy ping-pong never waits this long.
const mqWait = 2 * time.Second

func (c *mqConn) send(p []byte) error {
	for {
		call := unix.Syscall6
		if c.raw {
			call = unix.RawSyscall6
		}
		_, _, e := call(unix.SYS_MQ_TIMEDSEND, uintptr(c.tx), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)), 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return fmt.Errorf("mq_timedsend: %w", e)
		}
		return nil
	}
}

func (c *mqConn) recv(p []byte) error {
	for {
		call, ts := unix.Syscall6, uintptr(0)
		if c.raw {
			if c.calls&255 == 0 {
				c.refresh()
			}
			c.calls++
			call, ts = unix.RawSyscall6, uintptr(unsafe.Pointer(&c.deadline))
		}
		n, _, e := call(unix.SYS_MQ_TIMEDRECEIVE, uintptr(c.rx), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)), uintptr(unsafe.Pointer(&c.prio)), ts, 0)
		if e == unix.EINTR {
			continue
		}
		if e == unix.ETIMEDOUT {
			if c.abort != nil && c.abort.Load() {
				return io.ErrUnexpectedEOF
			}
			c.refresh()
			continue
		}
		if e != 0 {
			return fmt.Errorf("mq_timedreceive: %w", e)
		}
		if c.prio != 0 { // the watchdog's poison: the peer is gone
			return io.ErrUnexpectedEOF
		}
		if int(n) != len(p) {
			return fmt.Errorf("mq message %d of %d: %w", n, len(p), errShortMessage)
		}
		return nil
	}
}

func (c *mqConn) refresh() {
	c.deadline = unix.NsecToTimespec(time.Now().Add(mqWait).UnixNano())
}

func (c *mqConn) close() {
	unix.Close(c.tx)
	unix.Close(c.rx)
}

// poison unblocks a receiver waiting on rx after the peer died.
func (c *mqConn) poison(size int) {
	buf := make([]byte, size)
	ts := unix.Timespec{}
	unix.Syscall6(unix.SYS_MQ_TIMEDSEND, uintptr(c.rx), uintptr(unsafe.Pointer(&buf[0])), uintptr(size), 1, uintptr(unsafe.Pointer(&ts)), 0)
}
