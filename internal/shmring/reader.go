package shmring

import (
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// hello is the control message that carries the memfd; the version lets a
// producer refuse a ring it does not understand before mapping it. Version 2
// wakes a sleeping reader with a byte on the control socket (see Waiter).
const hello = "LGSHM2\n"

// Waiter is how a Reader sleeps until the writer wakes it. The aggregator
// waits for a byte on the producer's control socket, which a dialed Writer
// sends when it publishes while the reader sleeps: the waiting goroutine
// then parks in Go's netpoller and holds no OS thread, and only the reader
// decides what a wake-up costs it (a producer that floods the socket gains
// nothing the reader does not allow). Without a Waiter, Wait sleeps on the
// shared futex, which an in-process Writer (NewWriter) wakes.
type Waiter interface {
	// WaitWake returns when a wake-up arrived, or after d at the latest.
	WaitWake(d time.Duration)
}

// Reader is the aggregator's side of one ring: it owns the memfd and its
// mapping, created by Create and released by Close.
type Reader struct {
	cfg     Config
	fd      int
	mem     []byte
	data    []byte
	size    uint64
	mask    uint64
	head    uint64 // next byte to read; the published head lags it within Poll
	idle    bool   // the last Wait slept through its timeout
	scratch []byte
	// manual: Poll leaves the shared head alone and Release publishes it
	// (SetManualRelease); head is then the reader's private read cursor.
	manual bool
	rel    uint64 // manual: the last mark released (under mu; the shared head is the producer's to scribble on)

	tailp, headp            *uint64
	rsleep, wwaiting, closd *uint32
	kick                    atomic.Bool

	// mu orders Wake/MarkClosed (any goroutine) against Close's munmap,
	// which would otherwise turn a late Wake into a fault.
	mu       sync.Mutex
	unmapped bool
}

// Create makes a ring in a new sealed memfd and maps it.
func Create(c Config) (*Reader, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("logagg-shm", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("shmring: memfd_create: %w", err)
	}
	total := headerSize + c.Size
	if err := unix.Ftruncate(fd, int64(total)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shmring: ftruncate memfd to %d: %w", total, err)
	}
	// Sealing size changes is what makes it safe to map memory a producer
	// also holds: it cannot truncate the file under us and make us SIGBUS.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shmring: seal memfd: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, total, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shmring: mmap %d bytes: %w", total, err)
	}
	writeHeader(mem, c)
	r := &Reader{
		cfg: c, fd: fd, mem: mem, data: mem[headerSize:],
		size: uint64(c.Size), mask: uint64(c.Size - 1),
		tailp: u64(mem, offTail), headp: u64(mem, offHead),
		rsleep: u32(mem, offRSleep), wwaiting: u32(mem, offWWaiting), closd: u32(mem, offClosed),
	}
	return r, nil
}

// Config returns the ring's effective configuration.
func (r *Reader) Config() Config { return r.cfg }

// FD is the memfd (valid until DropFD or Close). The mapping does not need it.
func (r *Reader) FD() int { return r.fd }

// DropFD closes the memfd once it has been handed to the producer; the
// mapping stays valid. It saves one fd per connected producer.
func (r *Reader) DropFD() {
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}

// Send hands the ring to the producer at the other end of conn.
func (r *Reader) Send(conn *net.UnixConn) error {
	if r.fd < 0 {
		return fmt.Errorf("shmring: send: %w", ErrClosed)
	}
	if _, _, err := conn.WriteMsgUnix([]byte(hello), unix.UnixRights(r.fd), nil); err != nil {
		return fmt.Errorf("shmring: send memfd: %w", err)
	}
	return nil
}

// SetManualRelease makes Poll keep the frames it read in the ring until
// Release gives their space back: the shared head becomes a release
// cursor that only moves once the frames' records are safe elsewhere (the
// aggregator: written to its output), while Poll reads on ahead of it. A
// writer that outlives this reader then still holds every frame not
// released, and can offer them again (Writer.Unreleased). Call before the
// first Poll.
func (r *Reader) SetManualRelease(on bool) { r.manual = on }

// ReadMark is the ring offset just past the last frame Poll handed out:
// Release(ReadMark()) gives back every frame read so far. Poll's goroutine
// only.
func (r *Reader) ReadMark() uint64 { return r.head }

// Released is the last mark Release published (with SetManualRelease;
// otherwise the read cursor, and only Poll's goroutine may ask).
func (r *Reader) Released() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.manual {
		return r.head
	}
	return r.rel
}

// Release gives the writer back the space of every frame before mark (a
// ReadMark value), waking it if it waits for space. Marks must come in
// order; an older mark than one already released does nothing, and so
// does every mark without SetManualRelease (Poll releases). Safe from
// any goroutine, also concurrently with Poll and Close (after Close it does
// nothing).
func (r *Reader) Release(mark uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unmapped || !r.manual || mark <= r.rel {
		return
	}
	r.rel = mark
	atomic.StoreUint64(r.headp, mark)
	wakeIfFlagged(r.wwaiting)
}

// Poll calls fn with every complete frame published so far, in order, and
// returns how many it handled. fn's argument is a private copy, valid until
// fn returns. Space is released to the writer every quarter ring and at the
// end, so a long Poll does not stall the writer (unless SetManualRelease
// leaves that to Release). ErrCorrupt means the producer broke the layout;
// frames handled before it were good.
func (r *Reader) Poll(fn func(frame []byte)) (int, error) {
	if r.mem == nil {
		return 0, ErrClosed
	}
	tail := atomic.LoadUint64(r.tailp)
	if tail == r.head {
		return 0, nil
	}
	if tail-r.head > r.size { // also catches a tail behind the head
		return 0, fmt.Errorf("%w: tail %d head %d size %d", ErrCorrupt, tail, r.head, r.size)
	}
	n := 0
	released := r.head
	maxFrame := uint64(r.cfg.MaxFrame)
	for r.head != tail {
		pos := r.head & r.mask
		l := uint64(binary.LittleEndian.Uint32(r.data[pos:]))
		if l == padMarker {
			if r.size-pos > tail-r.head {
				return n, fmt.Errorf("%w: pad beyond tail", ErrCorrupt)
			}
			r.head += r.size - pos
			continue
		}
		fl := align8(frameHdr + l)
		if l > maxFrame || pos+fl > r.size || fl > tail-r.head {
			return n, fmt.Errorf("%w: frame length %d at %d (tail %d)", ErrCorrupt, l, r.head, tail)
		}
		r.scratch = append(r.scratch[:0], r.data[pos+frameHdr:pos+frameHdr+l]...)
		r.head += fl
		n++
		if !r.manual && r.head-released >= r.size/4 {
			r.release()
			released = r.head
		}
		fn(r.scratch)
	}
	if !r.manual {
		r.release()
	}
	return n, nil
}

func (r *Reader) release() {
	atomic.StoreUint64(r.headp, r.head)
	wakeIfFlagged(r.wwaiting)
}

// Pending reports whether published frames are waiting.
func (r *Reader) Pending() bool { return r.mem != nil && atomic.LoadUint64(r.tailp) != r.head }

// Wait returns when frames may be waiting, after Wake, or after a bounded
// sleep (so callers recheck their own stop conditions). It spins for the
// configured budget first, then sleeps in w (nil: on the futex).
func (r *Reader) Wait(w Waiter) {
	if r.mem == nil {
		return
	}
	spin := r.cfg.Spin
	if r.idle {
		spin = 0 // nothing came during the last sleep: do not burn a spin per timeout
	}
	for i := 0; i < spin; i++ {
		if atomic.LoadUint64(r.tailp) != r.head || r.kick.Load() {
			r.kick.Store(false)
			return
		}
		if i&255 == 255 {
			runtime.Gosched() // let the producer run if it shares our CPU
		}
	}
	atomic.StoreUint32(r.rsleep, 1)
	if atomic.LoadUint64(r.tailp) == r.head && !r.kick.Load() {
		// Wakes come from the writer's publish or from Wake; the timeout
		// only bounds a wake lost to a misbehaving producer.
		if w != nil {
			w.WaitWake(readerSleep)
		} else {
			futexWait(r.rsleep, 1, readerSleep)
		}
	}
	atomic.StoreUint32(r.rsleep, 0)
	r.idle = atomic.LoadUint64(r.tailp) == r.head && !r.kick.Load()
	r.kick.Store(false)
}

// Wake makes a current or the next Wait return. Safe from any goroutine,
// also concurrently with Close.
func (r *Reader) Wake() {
	r.kick.Store(true)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.unmapped {
		wakeIfFlagged(r.rsleep)
	}
}

// MarkClosed tells the writer that no more frames will be taken: its next
// Write, or a Write waiting for space, fails with ErrClosed. Frames it
// already published can still be read with Poll. Safe from any goroutine,
// also concurrently with Close.
func (r *Reader) MarkClosed() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.unmapped {
		atomic.StoreUint32(r.closd, 1)
		wakeIfFlagged(r.wwaiting)
	}
}

// Close unmaps the ring and closes the memfd. Not concurrent with Poll/Wait.
func (r *Reader) Close() error {
	r.DropFD()
	if r.mem == nil {
		return nil
	}
	r.MarkClosed()
	r.mu.Lock()
	r.unmapped = true
	err := unix.Munmap(r.mem)
	r.mem, r.data = nil, nil
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("shmring: munmap: %w", err)
	}
	return nil
}
