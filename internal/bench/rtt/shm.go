package rtt

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Shared-memory ping-pong. Both processes map the same memfd. The layout
// keeps each control word on its own cache line so only the sequence word
// bounces between cores:
//
//	0    seq      uint32  odd: a ping is waiting, even: a pong is waiting
//	64   waiters  uint32  >0 while someone sleeps in FUTEX_WAIT on seq
//	128  abort    uint32  set when the peer is gone
//	4096 payload  size bytes, written by the side that bumps seq
const (
	offSeq     = 0
	offWaiters = 64
	offAbort   = 128
	offPayload = 4096
)

type waitMode int

const (
	waitSpin  waitMode = iota // shm-spin
	waitFutex                 // shm-futex
	waitYield                 // shm-1core-threads, shm-1core-procs
)

const (
	// spinBeforeYield bounds pure spinning in shm-spin. Two spinners sharing
	// one CPU would otherwise each burn a whole time slice (milliseconds)
	// per hand-off; after this many polls the spinner yields, which on
	// separate CPUs never happens because the reply comes within ~100 ns.
	spinBeforeYield = 1 << 11
	// spinBeforeSleep is shm-futex's short optimistic spin before FUTEX_WAIT.
	spinBeforeSleep = 200
	futexWait       = 0 // FUTEX_WAIT, shared (no FUTEX_PRIVATE_FLAG: two processes)
	futexWake       = 1
)

func shmSize(size int) int { return offPayload + (size+4095)&^4095 }

// shmCreate creates and sizes the memfd the two sides share.
func shmCreate(size int) (int, error) {
	fd, err := unix.MemfdCreate("ipcbench-rtt", unix.MFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(shmSize(size))); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("ftruncate memfd: %w", err)
	}
	return fd, nil
}

type shmConn struct {
	mem     []byte
	seq     *atomic.Uint32
	waiters *atomic.Uint32
	abort   *atomic.Uint32
	payload []byte
	mode    waitMode
	raw     bool   // raw futex and sched_yield (see rawchan.IO.Raw)
	next    uint32 // the seq value this side last wrote or saw
}

func shmMap(fd, size int, mode waitMode, raw bool) (*shmConn, error) {
	mem, err := unix.Mmap(fd, 0, shmSize(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap memfd: %w", err)
	}
	return shmOver(mem, size, mode, raw), nil
}

// shmOver is one side's view of mem (shmSize(size) bytes laid out as
// above). Two views of one mapping are the two sides of an in-process row.
func shmOver(mem []byte, size int, mode waitMode, raw bool) *shmConn {
	return &shmConn{
		mem:     mem,
		seq:     (*atomic.Uint32)(unsafe.Pointer(&mem[offSeq])),
		waiters: (*atomic.Uint32)(unsafe.Pointer(&mem[offWaiters])),
		abort:   (*atomic.Uint32)(unsafe.Pointer(&mem[offAbort])),
		payload: mem[offPayload : offPayload+size],
		mode:    mode,
		raw:     raw,
	}
}

func (c *shmConn) send(p []byte) error {
	copy(c.payload, p)
	c.next++
	c.seq.Store(c.next) // release: the payload copy above is visible first
	if c.mode == waitFutex && c.waiters.Load() != 0 {
		futex(&c.mem[offSeq], futexWake, 1, nil, c.raw)
	}
	return nil
}

func (c *shmConn) recv(p []byte) error {
	want := c.next + 1
	if err := c.wait(want); err != nil {
		return err
	}
	c.next = want
	copy(p, c.payload)
	return nil
}

func (c *shmConn) wait(want uint32) error {
	// The peer may store its last reply and exit between our load of seq
	// and our look at abort, so a dead peer counts only if seq is still
	// not what we wait for after abort was seen.
	dead := func() bool { return c.abort.Load() != 0 && c.seq.Load() != want }
	switch c.mode {
	case waitYield:
		for c.seq.Load() != want {
			if dead() {
				return io.ErrUnexpectedEOF
			}
			c.yield()
		}
		return nil
	case waitSpin:
		for i := 1; c.seq.Load() != want; i++ {
			if i&1023 == 0 && dead() {
				return io.ErrUnexpectedEOF
			}
			if i >= spinBeforeYield {
				c.yield()
			}
		}
		return nil
	}
	for i := 0; i < spinBeforeSleep; i++ {
		if c.seq.Load() == want {
			return nil
		}
	}
	// The waiters increment and the writer's seq store are both sequentially
	// consistent, so either the writer sees waiters>0 and wakes us, or we
	// see the new seq here (and FUTEX_WAIT refuses to sleep on a changed
	// value). The timeout only bounds how long a dead peer goes unnoticed.
	ts := unix.NsecToTimespec(int64(100 * time.Millisecond))
	c.waiters.Add(1)
	defer c.waiters.Add(^uint32(0))
	for {
		cur := c.seq.Load()
		if cur == want {
			return nil
		}
		if dead() {
			return io.ErrUnexpectedEOF
		}
		futex(&c.mem[offSeq], futexWait, cur, &ts, c.raw)
	}
}

// kill marks the channel dead and wakes a sleeper (watchdog use).
func (c *shmConn) kill() {
	c.abort.Store(1)
	futex(&c.mem[offSeq], futexWake, 1<<30, nil, false)
}

func (c *shmConn) close() { unix.Munmap(c.mem) }

func (c *shmConn) yield() {
	if c.raw {
		unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	} else {
		unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

func futex(addr *byte, op int, val uint32, ts *unix.Timespec, raw bool) {
	call := unix.Syscall6
	if raw {
		call = unix.RawSyscall6
	}
	call(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), uintptr(op), uintptr(val), uintptr(unsafe.Pointer(ts)), 0, 0)
}
