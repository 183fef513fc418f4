package transport

import (
	"errors"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DefaultFDReserve is how many file descriptors FDGate keeps out of the
// connections' reach: what the daemon opens after start-up besides them
// (a new segment at rotation while the old one is open, a reload's
// listeners and lock files, metrics scrapes, peer lookups' netlink sockets
// and /proc directories, a Kafka forwarder's brokers, sd_notify). Whatever
// the connections leave, these still find.
const DefaultFDReserve = 64

// recountEvery bounds how often a gate that finds itself short counts
// /proc/self/fd again (a count of 20,000 descriptors costs a few ms).
const recountEvery = 100 * time.Millisecond

// FDGate is the file descriptors every accepting listener of a process
// shares (the limit is per process): a listener reserves a connection's
// descriptors with Acquire before it calls accept, and does not accept
// while the gate says no, so a client waits in the listen backlog instead
// of being accepted and then dropped for want of a descriptor (ADR 0052).
//
// The gate's count of open descriptors is an estimate: /proc/self/fd
// counted when it was created and whenever the estimate says it is short,
// moved by what listeners acquire and release in between, and raised to
// what accept's descriptor numbers prove (the kernel hands out the lowest
// free one, so an accepted fd N means N+1 are open). Descriptors others
// open in between are seen at the next count; the kernel's EMFILE at
// accept, which leaves the connection in the backlog, is the backstop.
//
// Safe for concurrent use.
type FDGate struct {
	limit, reserve int

	mu      sync.Mutex
	open    int // estimated descriptors open
	pending int // acquired, not yet opened (Commit) or given back (Refund)
	counted time.Time
	stale   bool          // the kernel said EMFILE: count before trusting the estimate
	freed   chan struct{} // closed by the next Release or Refund; nil until asked for
}

// NewFDGate makes the gate of this process: its soft RLIMIT_NOFILE less
// reserve descriptors, with what is open now counted.
func NewFDGate(reserve int) (*FDGate, error) {
	limit, err := fdLimit()
	if err != nil {
		return nil, err
	}
	g := &FDGate{limit: limit, reserve: max(reserve, 0)}
	g.mu.Lock()
	g.recountLocked()
	g.mu.Unlock()
	return g, nil
}

func fdLimit() (int, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	return int(min(rl.Cur, 1<<30)), nil
}

// Limit is the soft RLIMIT_NOFILE the gate works with (read again at
// every count: an operator may raise it with prlimit(1) while listeners
// wait).
func (g *FDGate) Limit() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.limit
}

// Reserve is the number of descriptors kept out of the connections' reach.
func (g *FDGate) Reserve() int { return g.reserve }

// Open is the gate's estimate of the descriptors open.
func (g *FDGate) Open() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// Recount counts the open descriptors now (a daemon once its listeners
// and outputs are open).
func (g *FDGate) Recount() {
	g.mu.Lock()
	g.recountLocked()
	g.mu.Unlock()
}

// Acquire reserves n descriptors for a connection about to be accepted.
// It reports false, reserving nothing, when that would leave fewer than
// the reserve free (counted again first if the last count is old).
func (g *FDGate) Acquire(n int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.stale && g.fitsLocked(n) {
		g.pending += n
		return true
	}
	if g.stale || time.Since(g.counted) >= recountEvery {
		g.recountLocked()
		if g.fitsLocked(n) {
			g.pending += n
			return true
		}
	}
	return false
}

func (g *FDGate) fitsLocked(n int) bool { return g.open+g.pending+n+g.reserve <= g.limit }

// Commit says that n acquired descriptors now exist (accept returned fd,
// or fd < 0 when the number is not known).
func (g *FDGate) Commit(n, fd int) {
	g.mu.Lock()
	g.pending -= n
	g.open += n
	if fd >= 0 {
		// Every descriptor below the lowest free one is open.
		g.open = max(g.open, fd+1)
	}
	g.mu.Unlock()
}

// Refund gives back n acquired descriptors that were never opened.
func (g *FDGate) Refund(n int) {
	g.mu.Lock()
	g.pending -= n
	g.wakeLocked()
	g.mu.Unlock()
}

// Release says that n committed descriptors were closed.
func (g *FDGate) Release(n int) {
	g.mu.Lock()
	g.open = max(g.open-n, 0)
	g.wakeLocked()
	g.mu.Unlock()
}

// Exhausted says that the kernel refused a descriptor (EMFILE): the
// estimate was wrong, and the next Acquire counts again.
func (g *FDGate) Exhausted() {
	g.mu.Lock()
	g.stale = true
	g.mu.Unlock()
}

// Freed returns a channel closed at the next Release or Refund, for a
// listener waiting for descriptors.
func (g *FDGate) Freed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.freed == nil {
		g.freed = make(chan struct{})
	}
	return g.freed
}

func (g *FDGate) wakeLocked() {
	if g.freed != nil {
		close(g.freed)
		g.freed = nil
	}
}

func (g *FDGate) recountLocked() {
	g.counted = time.Now()
	if limit, err := fdLimit(); err == nil {
		g.limit = limit
	}
	n, err := CountOpenFDs()
	if err != nil {
		// Most likely EMFILE itself: take the gate as full until a count
		// succeeds.
		g.open = g.limit
		g.stale = true
		return
	}
	g.open, g.stale = n, false
}

// CountOpenFDs counts this process's open file descriptors (the entries
// of /proc/self/fd, less the one that reads it), without an allocation per
// entry: with tens of thousands of connections open, os.ReadDir would
// allocate a name for each.
func CountOpenFDs() (int, error) {
	dir, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(dir)
	var buf [16 << 10]byte
	n := 0
	for {
		k, err := unix.Getdents(dir, buf[:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if k <= 0 {
			return n - 1, nil // less the descriptor reading the directory
		}
		for off := 0; off < k; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name
			d := buf[off:k]
			reclen := int(*(*uint16)(unsafe.Pointer(&d[16])))
			if reclen == 0 {
				break
			}
			if name := d[19]; name != '.' {
				n++
			}
			off += reclen
		}
	}
}
