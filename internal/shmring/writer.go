package shmring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Writer is the producer's side of one ring. It is not safe for concurrent
// use: one goroutine writes at a time (the client serialises).
type Writer struct {
	mem       []byte
	data      []byte
	size      uint64
	mask      uint64
	maxFrame  int
	spin      int
	tail      uint64 // next byte to write; equals the published tail between Writes
	headCache uint64 // last head seen; reloaded only when it says the ring is full

	tailp, headp            *uint64
	rsleep, wwaiting, closd *uint32
	ctl                     *net.UnixConn // nil for NewWriter
	ctlRaw                  syscall.RawConn
	// dead is set when a wake-up byte could not be sent because the
	// aggregator's end of the control socket is gone: later Writes fail
	// with ErrClosed at once instead of filling a ring nobody reads.
	dead bool
}

// Dial connects to an aggregator's shm control socket, receives the ring
// and maps it. The control connection stays open for the Writer's life:
// its closing is how the aggregator learns that the producer is gone.
func Dial(controlPath string) (*Writer, error) {
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: controlPath, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("shmring: dial %s: %w", controlPath, err)
	}
	return DialConn(conn)
}

// DialConn is Dial over a control connection the caller made (a client
// that checks whose socket it reached first). It takes conn over: it is
// closed on error, and by Close.
func DialConn(conn *net.UnixConn) (*Writer, error) {
	w, err := receive(conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	w.ctl = conn
	if w.ctlRaw, err = conn.SyscallConn(); err != nil {
		w.Close()
		return nil, fmt.Errorf("shmring: control socket: %w", err)
	}
	return w, nil
}

func receive(conn *net.UnixConn) (*Writer, error) {
	buf := make([]byte, 64)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, fmt.Errorf("shmring: receive ring: %w", err)
	}
	var fds []int
	if cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, c := range cmsgs {
			if f, err := unix.ParseUnixRights(&c); err == nil {
				fds = append(fds, f...)
			}
		}
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if string(buf[:n]) != hello || len(fds) != 1 {
		return nil, fmt.Errorf("%w: unexpected handshake %q with %d fds", ErrBadRing, buf[:n], len(fds))
	}
	return NewWriter(fds[0])
}

// NewWriter maps the ring in memfd fd (which it does not take over; the
// caller may close fd afterwards). Used by Dial and by in-process
// benchmarks; such a Writer has no control socket.
func NewWriter(fd int) (*Writer, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shmring: fstat ring: %w", err)
	}
	if st.Size < headerSize+MinSize || st.Size > headerSize+MaxSize {
		return nil, fmt.Errorf("%w: size %d", ErrBadRing, st.Size)
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shmring: mmap ring: %w", err)
	}
	size, maxFrame, err := checkHeader(mem)
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	w := &Writer{
		mem: mem, data: mem[headerSize:], size: uint64(size), mask: uint64(size - 1),
		maxFrame: maxFrame, spin: DefaultSpin,
		tailp: u64(mem, offTail), headp: u64(mem, offHead),
		rsleep: u32(mem, offRSleep), wwaiting: u32(mem, offWWaiting), closd: u32(mem, offClosed),
	}
	w.tail = atomic.LoadUint64(w.tailp)
	w.headCache = atomic.LoadUint64(w.headp)
	return w, nil
}

// MaxFrame is the largest payload one Write accepts.
func (w *Writer) MaxFrame() int { return w.maxFrame }

// SetSpin sets how many polls of the head a Write makes while the ring is
// full before it sleeps (<=0: sleep at once).
func (w *Writer) SetSpin(n int) { w.spin = max(n, 0) }

// Write publishes p as one frame. It blocks while the ring is full
// (backpressure; nothing is dropped). A frame larger than MaxFrame is
// refused with ErrTooLarge, never truncated. After the reader closed the
// ring, or when the aggregator is gone while Write waits, it returns
// ErrClosed and p was not published.
func (w *Writer) Write(p []byte) error {
	if w.mem == nil {
		return ErrClosed
	}
	if len(p) > w.maxFrame {
		return fmt.Errorf("%w: %d > %d bytes", ErrTooLarge, len(p), w.maxFrame)
	}
	if w.dead || atomic.LoadUint32(w.closd) != 0 {
		return ErrClosed
	}
	fl := align8(frameHdr + uint64(len(p)))
	pos := w.tail & w.mask
	if rem := w.size - pos; rem < fl {
		// The frame would wrap: fill the end with a pad marker and start
		// over at 0. The pad is published on its own so that a frame of
		// almost the ring's size still fits once the reader caught up.
		if err := w.reserve(rem); err != nil {
			return err
		}
		binary.LittleEndian.PutUint32(w.data[pos:], padMarker)
		w.tail += rem
		w.publish()
		pos = 0
	}
	if err := w.reserve(fl); err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(w.data[pos:], uint32(len(p)))
	copy(w.data[pos+frameHdr:], p)
	w.tail += fl
	w.publish() // the commit: only now can the reader see the frame
	return nil
}

func (w *Writer) publish() {
	atomic.StoreUint64(w.tailp, w.tail)
	if w.ctlRaw == nil {
		wakeIfFlagged(w.rsleep) // in-process: the reader sleeps on the futex
		return
	}
	if atomic.LoadUint32(w.rsleep) != 0 && atomic.CompareAndSwapUint32(w.rsleep, 1, 0) {
		// The aggregator sleeps waiting for a byte on the control socket.
		// One byte per sleep; if the socket is full a wake-up is already
		// pending, so EAGAIN loses nothing.
		w.ctlRaw.Control(func(fd uintptr) {
			var b = [1]byte{'w'}
			if _, err := unix.Write(int(fd), b[:]); err == unix.EPIPE || err == unix.ECONNRESET {
				w.dead = true // the frame is in the ring: Unreleased offers it again
			}
		})
	}
}

// reserve waits until n bytes are free after the tail.
func (w *Writer) reserve(n uint64) error {
	if w.size-(w.tail-w.headCache) >= n {
		return nil
	}
	for i := 0; ; i++ {
		if err := w.loadHead(); err != nil {
			return err
		}
		if w.size-(w.tail-w.headCache) >= n {
			// We may have waited through a shutdown: a reader that is
			// draining must not get frames after it said stop.
			if atomic.LoadUint32(w.closd) != 0 {
				return ErrClosed
			}
			return nil
		}
		if atomic.LoadUint32(w.closd) != 0 {
			return ErrClosed
		}
		if i < w.spin {
			if i&255 == 255 {
				runtime.Gosched()
			}
			continue
		}
		atomic.StoreUint32(w.wwaiting, 1)
		if err := w.loadHead(); err != nil {
			return err
		}
		if w.size-(w.tail-w.headCache) < n && atomic.LoadUint32(w.closd) == 0 {
			futexWait(w.wwaiting, 1, sleepSlice)
		}
		atomic.StoreUint32(w.wwaiting, 0)
		if w.size-(w.tail-w.headCache) < n && !w.peerAlive() {
			return ErrClosed
		}
	}
}

func (w *Writer) loadHead() error {
	h := atomic.LoadUint64(w.headp)
	if w.tail-h > w.size {
		return fmt.Errorf("%w: head %d tail %d", ErrBadRing, h, w.tail)
	}
	w.headCache = h
	return nil
}

// peerAlive reports whether the control socket is still open at the other
// end; a dead aggregator must not leave a producer waiting forever.
func (w *Writer) peerAlive() bool {
	if w.ctl == nil {
		return true
	}
	rc, err := w.ctl.SyscallConn()
	if err != nil {
		return false
	}
	alive := true
	rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		alive = n > 0 || errors.Is(err, unix.EAGAIN)
	})
	return alive
}

// PeerAlive reports whether the aggregator still holds the other end of
// the control socket (always true for a Writer made by NewWriter).
func (w *Writer) PeerAlive() bool { return !w.dead && w.peerAlive() }

// Pending reports whether frames are in the ring that the reader has not
// released yet (read and written elsewhere, with SetManualRelease).
func (w *Writer) Pending() bool {
	return w.mem != nil && atomic.LoadUint64(w.headp) != w.tail
}

// WaitReleased waits until the reader released every frame written, at
// most d. It returns nil once all are released, ErrClosed when the
// aggregator is gone (the frames stay in the ring for Unreleased), and
// ErrTimeout when d passed first.
func (w *Writer) WaitReleased(d time.Duration) error {
	if w.mem == nil {
		return ErrClosed
	}
	deadline := time.Now().Add(d)
	for {
		if err := w.loadHead(); err != nil {
			return err
		}
		if w.headCache == w.tail {
			return nil
		}
		if !w.PeerAlive() {
			return ErrClosed
		}
		left := time.Until(deadline)
		if left <= 0 {
			return ErrTimeout
		}
		// The reader wakes writerWaiting when it releases space.
		atomic.StoreUint32(w.wwaiting, 1)
		if atomic.LoadUint64(w.headp) != w.tail {
			futexWait(w.wwaiting, 1, min(left, sleepSlice))
		}
		atomic.StoreUint32(w.wwaiting, 0)
	}
}

// Unreleased calls fn with each frame the reader has not released, in
// order, stopping at fn's first error. A producer whose aggregator died
// (or closed the ring) offers these frames to the next one: they may have
// been read, but nothing says their records reached the output. The ring
// is read as the writer left it; the dead reader may have scribbled on the
// shared head, so every length is checked (ErrBadRing).
func (w *Writer) Unreleased(fn func(frame []byte) error) error {
	if w.mem == nil {
		return ErrClosed
	}
	head := atomic.LoadUint64(w.headp)
	if w.tail-head > w.size {
		return fmt.Errorf("%w: head %d tail %d", ErrBadRing, head, w.tail)
	}
	for head != w.tail {
		pos := head & w.mask
		l := uint64(binary.LittleEndian.Uint32(w.data[pos:]))
		if l == padMarker {
			if w.size-pos > w.tail-head {
				return fmt.Errorf("%w: pad beyond tail", ErrBadRing)
			}
			head += w.size - pos
			continue
		}
		fl := align8(frameHdr + l)
		if l > uint64(w.maxFrame) || pos+fl > w.size || fl > w.tail-head {
			return fmt.Errorf("%w: frame length %d at %d (tail %d)", ErrBadRing, l, head, w.tail)
		}
		if err := fn(w.data[pos+frameHdr : pos+frameHdr+l]); err != nil {
			return err
		}
		head += fl
	}
	return nil
}

// Close unmaps the ring and closes the control socket, which tells the
// aggregator to drain what was published and release its side.
func (w *Writer) Close() error {
	var err error
	if w.mem != nil {
		err = unix.Munmap(w.mem)
		w.mem, w.data = nil, nil
	}
	if w.ctl != nil {
		if cerr := w.ctl.Close(); err == nil {
			err = cerr
		}
		w.ctl = nil
	}
	return err
}
