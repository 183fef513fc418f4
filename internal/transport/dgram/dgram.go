package dgram

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/peerid"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/evloop"
)

// Conn is the socket a Receiver serves: *net.UnixConn and *net.UDPConn
// implement it.
type Conn interface {
	SyscallConn() (syscall.RawConn, error)
	SetReadDeadline(t time.Time) error
	Close() error
}

// Config describes one datagram socket to serve.
type Config struct {
	Conn Conn
	Deps transport.Deps
	// Meta is the template of every record's metadata: the caller sets
	// Transport and Listener; the Receiver fills Peer and RecvNS.
	Meta record.Meta
	// Creds enables SO_PASSCRED and records the sender's pid/uid/gid from
	// each datagram's SCM_CREDENTIALS (unix sockets only).
	Creds bool
	// SourceAddr records each datagram's source address as Peer.Addr (udp).
	SourceAddr bool
	// MaxDatagram is the largest datagram the transport can carry (65535 for
	// UDP); receive buffers are never larger. 0 means no transport limit.
	MaxDatagram int
	// Vec is the number of datagrams read per recvmmsg call (default 64).
	// It is lowered when Vec*MaxRecord would exceed Options.DgramVector
	// bytes of buffers.
	Vec int
	// StopArrivals, if set, is applied to the socket when shutdown starts,
	// before the drain, to refuse new datagrams (unixgram: shutdown(SHUT_RD)).
	StopArrivals func(fd int) error
	// Detach takes the socket off Go's netpoller and serves it on an event
	// loop (Deps.Loops, see package evloop and detachedRaw).
	Detach bool
	// Coalesce, with Detach, asks the loop to pause this long after a
	// recvmmsg call that
	// returned fewer than Vec datagrams, so a sender's datagrams collect
	// instead of each waking us. Not for unix datagram sockets: a sender
	// blocks once net.unix.max_dgram_qlen (10) datagrams are queued, and
	// then has to be woken anyway.
	Coalesce time.Duration
}

// Stats are counters for tests and benchmarks.
type Stats struct {
	Calls     uint64 // recvmmsg calls that returned at least one datagram
	Datagrams uint64 // datagrams received
	Truncated uint64 // datagrams longer than the buffer (MSG_TRUNC)
	Drops     uint64 // kernel drops counted (SO_RXQ_OVFL / SO_MEMINFO)
	FDsClosed uint64 // file descriptors received via SCM_RIGHTS and closed
	// BatchSizes[i] counts recvmmsg calls that returned n datagrams with
	// bits.Len(n-1) == i: 1, 2, 3-4, 5-8, 9-16, 17-32, 33-64, >64.
	BatchSizes [8]uint64
	RcvBuf     int  // SO_RCVBUF granted (getsockopt value)
	Vec        int  // datagrams per recvmmsg call
	Slot       int  // bytes of buffer per datagram
	Forced     bool // SO_RCVBUFFORCE was accepted
}

const (
	defaultVec   = 64
	maxVirtual   = 64 << 20 // of address space for one socket's data area
	pageSize     = 4096
	ctrlSize     = 128 // SCM_CREDENTIALS (32) + SO_RXQ_OVFL (24), with room to spare
	nameSize     = unix.SizeofSockaddrAny
	addrCacheMax = 4096
	viaKernel    = "kernel"
)

// Receiver reads one datagram socket. See the package doc for its contract.
type Receiver struct {
	cfg Config
	d   transport.Deps
	raw syscall.RawConn
	// detached is raw when Config.Detach took the socket off the netpoller
	// to be served by an event loop (serveOnLoop).
	detached *detachedRaw
	loop     *evloop.Loop
	reg      evloop.Slot
	hot      bool // read every round, out of the epoll set (setHot)
	failed   chan error
	vec      int
	slot     int

	msgs  []unix.Mmsghdr
	iovs  []unix.Iovec
	data  []byte
	ctrl  []byte
	names []byte
	held  int64 // bytes of the vectors, counted in the memory metrics
	dirty int   // messages the kernel may have written since the last reset
	// vlen is the number of datagrams the next recvmmsg asks for: vec,
	// or bigVlen after a call that returned a datagram longer than a
	// page, so that long datagrams touch at most bigVlen slots per call
	// before trim gives their pages back.
	vlen, bigVlen int
	mapped        bool // data is mmap'ed (trim can give pages back)

	// Result of the last recvmmsg call made by readFn.
	n     int
	errno unix.Errno
	// readFn is r.read bound once, so RawConn.Read does not allocate a
	// closure per call.
	readFn func(fd uintptr) bool
	// gotData is set when data was read since the queue was last empty.
	gotData bool

	meta record.Meta
	out  *sink.Emitter

	// Kernel drops seen since the last hand-over, added to metrics then.
	pendingDrops int

	lastDrops uint32 // kernel's cumulative drop counter as last seen
	noMeminfo bool   // tests: count drops only from SO_RXQ_OVFL messages

	// Source address cache (udp): rendering an address allocates, so each
	// distinct source is rendered once.
	lastKey   addrKey
	haveKey   bool
	addrCache map[addrKey]srcAddr
	// peers finds the process behind a loopback source (SourceAddr only):
	// one /proc walk per sender and TTL, and once per batch a confirmation
	// that the sender's socket is still the one bound to its address
	// (peerFresh: done for lastKey in this batch; readAt: when the batch
	// was read). See peerid.UDPCache.
	peers     *peerid.UDPCache
	local     netip.AddrPort
	peerFresh bool
	readAt    time.Time

	warnedCtrunc bool

	calls, datagrams, truncated, drops, fdsClosed atomic.Uint64
	batchSizes                                    [8]atomic.Uint64
	rcvbuf                                        int
	forced                                        bool

	closeOnce sync.Once
	closeErr  error
}

type addrKey [28]byte // family, port, address, scope: a sockaddr_in6 fits

// srcAddr is a rendered source address and whether its sender is looked up.
type srcAddr struct {
	s      string
	ap     netip.AddrPort
	lookup bool // loopback: the sender is a local process
}

// New configures the socket (SO_RXQ_OVFL, SO_PASSCRED, receive buffer) and
// lays out the receive buffers. It does not close c on error.
func New(c Config) (*Receiver, error) {
	if c.Conn == nil || c.Deps.Sink == nil || c.Deps.Metrics == nil {
		return nil, errors.New("dgram: Config needs Conn, Deps.Sink and Deps.Metrics")
	}
	d := c.Deps
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	raw, err := c.Conn.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("dgram: %w", err)
	}
	r := &Receiver{cfg: c, d: d, raw: raw, meta: c.Meta, out: d.Sink.Emitter(d.Metrics)}
	r.meta.Peer = record.Peer{}
	r.meta.Prepare()
	if c.SourceAddr {
		r.addrCache = make(map[addrKey]srcAddr)
		r.peers = peerid.NewUDPCache(0, peerid.DefaultBudget, 0)
		if la, ok := c.Conn.(interface{ LocalAddr() net.Addr }); ok {
			if ua, ok := la.LocalAddr().(*net.UDPAddr); ok {
				r.local = ua.AddrPort()
			}
		}
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = r.setup(int(fd)) }); err != nil {
		return nil, fmt.Errorf("dgram: %w", err)
	}
	if serr != nil {
		return nil, serr
	}
	r.layout()
	r.readFn = r.read
	if c.Detach {
		if dr, err := detach(raw, c.Conn); err != nil {
			d.Log.Warn("datagram: staying on the netpoller", "listener", c.Meta.Listener, "err", err)
		} else {
			r.raw, r.detached = dr, dr
		}
	}
	d.Metrics.RcvBuf.Set(float64(r.rcvbuf))
	d.Log.Info("datagram receive buffer",
		"requested_bytes", d.Opts.RcvBuf, "granted_bytes", r.rcvbuf, "forced", r.forced,
		"note", "granted is getsockopt(SO_RCVBUF), which the kernel doubles for bookkeeping",
		"datagrams_per_recvmmsg", r.vec, "buffer_per_datagram", r.slot)
	return r, nil
}

func (r *Receiver) setup(fd int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1); err != nil {
		return fmt.Errorf("dgram: setsockopt SO_RXQ_OVFL: %w", err)
	}
	if r.cfg.Creds {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
			return fmt.Errorf("dgram: setsockopt SO_PASSCRED: %w", err)
		}
	}
	if want := r.d.Opts.RcvBuf; want > 0 {
		// SO_RCVBUFFORCE ignores net.core.rmem_max but needs CAP_NET_ADMIN;
		// plain SO_RCVBUF is silently capped at rmem_max.
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, want); err == nil {
			r.forced = true
		} else if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, want); err != nil {
			return fmt.Errorf("dgram: setsockopt SO_RCVBUF %d: %w", want, err)
		}
	}
	got, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err != nil {
		return fmt.Errorf("dgram: getsockopt SO_RCVBUF: %w", err)
	}
	r.rcvbuf = got
	// Baseline of the drop counter, in case the socket was not fresh.
	if v, ok := socketDrops(fd); ok {
		r.lastDrops = v
	}
	return nil
}

func (r *Receiver) layout() {
	slot := r.d.Opts.MaxRecord
	if slot <= 0 || (r.cfg.MaxDatagram > 0 && slot > r.cfg.MaxDatagram) {
		slot = r.cfg.MaxDatagram
	}
	if slot <= 0 {
		slot = 64 << 10
	}
	vec := r.cfg.Vec
	if vec <= 0 {
		vec = defaultVec
	}
	bound := r.d.Opts.DgramVector
	if bound <= 0 {
		bound = transport.DefaultDgramVector
	}
	if vec*slot > maxVirtual {
		vec = max(1, maxVirtual/slot)
	}
	r.vec, r.slot, r.vlen = vec, slot, vec
	r.bigVlen = min(max(1, bound/slot), vec)
	r.msgs = make([]unix.Mmsghdr, vec)
	r.iovs = make([]unix.Iovec, vec)
	// The data area is mapped outside the Go heap, so that the pages a
	// burst of long datagrams touched can be given back (trim): small
	// datagrams keep one page of each slot resident, long ones at most
	// Options.DgramVector.
	data, err := unix.Mmap(-1, 0, vec*slot, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		data = make([]byte, vec*slot) // cannot be trimmed, but works
	} else {
		r.mapped = true
	}
	r.data = data
	r.ctrl = make([]byte, vec*ctrlSize)
	if r.cfg.SourceAddr {
		r.names = make([]byte, vec*nameSize)
	}
	// Resident: the headers, and the first page of each slot once used.
	r.held = int64(len(r.ctrl)+len(r.names)) + int64(vec)*int64(min(slot, pageSize))
	r.d.Memory().Add(metrics.MemDatagramVectors, r.held)
	for i := range r.msgs {
		r.iovs[i].Base = &r.data[i*slot]
		r.iovs[i].SetLen(slot)
		h := &r.msgs[i].Hdr
		h.Iov = &r.iovs[i]
		h.SetIovlen(1)
		h.Control = &r.ctrl[i*ctrlSize]
		if r.names != nil {
			h.Name = &r.names[i*nameSize]
		}
	}
	r.dirty = vec
}

// recv makes one non-blocking recvmmsg call.
func (r *Receiver) recv(fd uintptr) (int, unix.Errno) {
	for i := 0; i < r.dirty; i++ {
		m := &r.msgs[i]
		m.Hdr.SetControllen(ctrlSize)
		if r.names != nil {
			m.Hdr.Namelen = nameSize
		}
		m.Hdr.Flags = 0
		m.Len = 0
	}
	for {
		// MSG_TRUNC makes the kernel report a datagram's real length, so
		// the bytes it cuts off a datagram longer than the slot are counted.
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.msgs[0])), uintptr(r.vlen),
			unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC|unix.MSG_TRUNC, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			r.dirty = 1 // a failed call may still have touched the first header
			return 0, e
		}
		r.dirty = min(int(n)+1, len(r.msgs))
		return int(n), 0
	}
}

// read is the RawConn.Read callback: false parks the goroutine in the
// netpoller until the socket is readable.
func (r *Receiver) read(fd uintptr) bool {
	r.n, r.errno = r.recv(fd)
	if r.errno == unix.EAGAIN || (r.errno == 0 && r.n == 0) {
		if r.gotData {
			// The queue is empty after reading: count drops the datagrams
			// could not report yet (see package doc), then park.
			r.gotData = false
			r.reconcileDrops(int(fd))
			r.flushDrops()
		}
		return false
	}
	return true
}

// transient reports errors after which reading can go on.
func transient(e unix.Errno) bool {
	switch e {
	case unix.ENOMEM, unix.ENOBUFS, unix.ECONNREFUSED, unix.EHOSTUNREACH, unix.ENETUNREACH:
		return true
	}
	return false
}

// Run serves until ctx ends, then drains, closes the socket and returns nil.
// An error means the socket failed.
func (r *Receiver) Run(ctx context.Context) error {
	defer r.Close()
	defer r.out.Release() // counts what a hard stop left behind
	if r.detached != nil {
		if err := r.serveOnLoop(ctx); err != nil {
			return r.submitFailed(ctx, err)
		}
	} else if err := r.serveNetpoll(ctx); err != nil {
		return err
	}
	if err := r.drain(); err != nil {
		return r.submitFailed(ctx, err)
	}
	return nil
}

// serveNetpoll reads in this goroutine, parked in Go's netpoller between
// datagrams, until ctx ends.
func (r *Receiver) serveNetpoll(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		// A deadline in the past makes the parked RawConn.Read return.
		_ = r.cfg.Conn.SetReadDeadline(time.Unix(1, 0))
	})
	defer stop()
	for ctx.Err() == nil {
		r.n, r.errno = 0, 0
		if err := r.raw.Read(r.readFn); err != nil {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("dgram: read %s: %w", r.cfg.Meta.Listener, err)
		}
		if r.errno != 0 {
			if transient(r.errno) {
				r.d.Log.Warn("datagram receive error, continuing", "listener", r.cfg.Meta.Listener, "err", r.errno)
				continue
			}
			return fmt.Errorf("dgram: recvmmsg %s: %w", r.cfg.Meta.Listener, r.errno)
		}
		r.gotData = true
		if err := r.handle(r.n); err != nil {
			return r.submitFailed(ctx, err)
		}
	}
	return nil
}

// serveOnLoop hands the socket to an event loop (Deps.Loops, or one of its
// own), which calls Ready when datagrams are queued, until ctx ends or
// reading fails.
func (r *Receiver) serveOnLoop(ctx context.Context) error {
	group := r.d.Loops
	if group == nil {
		g, err := evloop.NewGroup(1)
		if err != nil {
			return err
		}
		defer g.Close()
		group = g
	}
	l := group.Pick()
	r.failed = make(chan error, 1)
	added := make(chan error, 1)
	l.Do(func() {
		s, err := l.Add(r.detached.fd, r)
		r.loop, r.reg = l, s
		added <- err
	})
	if err := <-added; err != nil {
		return err
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-r.failed:
	}
	removed := make(chan struct{})
	l.Do(func() { l.Remove(r.reg); close(removed) })
	<-removed
	return err
}

// Ready implements evloop.Handler: one recvmmsg call per round, so
// sockets sharing a loop take turns. After a full vector the receiver is
// hot (called next round without an event, until a read comes back
// empty); after a short one, with Config.Coalesce, it asks for a pause and
// stays hot, out of the epoll set, so senders' datagrams do not run
// epoll's wake-up callback one by one.
func (r *Receiver) Ready(uint32) {
	fd := r.detached.fd
	asked := r.vlen
	n, e := r.recv(uintptr(fd))
	if e == unix.EAGAIN || (e == 0 && n == 0) {
		if r.gotData {
			// The queue is empty after reading: count the drops the
			// datagrams could not report yet (see package doc).
			r.gotData = false
			r.reconcileDrops(fd)
			r.flushDrops()
		}
		r.setHot(false)
		return
	}
	if e != 0 {
		if transient(e) {
			r.d.Log.Warn("datagram receive error, continuing", "listener", r.cfg.Meta.Listener, "err", e)
			return
		}
		r.fail(fmt.Errorf("dgram: recvmmsg %s: %w", r.cfg.Meta.Listener, e))
		return
	}
	r.gotData = true
	if err := r.handle(n); err != nil {
		r.fail(err)
		return
	}
	if n == asked {
		// More may be queued: read again next round whether or not epoll
		// says so, so the EAGAIN that follows reconciles the drop counter.
		r.setHot(true)
		return
	}
	// A short read emptied the queue (as EAGAIN would have said): count
	// the drops no datagram reported yet, now, not at the next datagram.
	r.gotData = false
	r.reconcileDrops(fd)
	r.flushDrops()
	if r.cfg.Coalesce > 0 {
		// Read again after the pause, out of the epoll set meanwhile (as
		// stream connections do: see stream's conn.Ready), until a read
		// finds the queue empty.
		r.setHot(true)
		r.loop.Pause(r.cfg.Coalesce)
	} else {
		r.setHot(false)
	}
}

// setHot moves the socket between "read every round, out of the epoll set"
// and "read when epoll says so".
func (r *Receiver) setHot(hot bool) {
	if r.hot == hot {
		return
	}
	if err := r.loop.Watch(r.reg, !hot); err != nil {
		r.fail(err)
		return
	}
	r.hot = hot
	r.loop.SetHot(r.reg, hot)
}

// fail stops reading on the loop and tells serveOnLoop why.
func (r *Receiver) fail(err error) {
	r.loop.Remove(r.reg)
	select {
	case r.failed <- err:
	default:
	}
}

// submitFailed decides what a failed Submit means: during shutdown the hard
// deadline passed (counted, not an error); otherwise the pipeline is gone.
func (r *Receiver) submitFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		r.d.Log.Warn("datagram drain cut short", "listener", r.cfg.Meta.Listener, "err", err)
		return nil
	}
	return err
}

// drain reads what the kernel already queued, without waiting.
func (r *Receiver) drain() error {
	if r.cfg.StopArrivals != nil {
		var serr error
		_ = r.raw.Control(func(fd uintptr) { serr = r.cfg.StopArrivals(int(fd)) })
		if serr != nil {
			r.d.Log.Warn("datagram: cannot refuse new arrivals", "listener", r.cfg.Meta.Listener, "err", serr)
		}
	}
	var deadline time.Time
	if g := r.d.Opts.DrainGrace; g > 0 {
		deadline = time.Now().Add(g)
	}
	var n int
	var e unix.Errno
	recvOnce := func(fd uintptr) { n, e = r.recv(fd) }
	// Past the hard stop what is queued is still read, within the grace
	// period, so that every datagram we took from the kernel is counted
	// as dropped rather than discarded unseen with the socket.
	for deadline.IsZero() || time.Now().Before(deadline) {
		if deadline.IsZero() && r.d.Sink.HardStop().Err() != nil {
			break
		}
		n, e = 0, 0
		if err := r.raw.Control(recvOnce); err != nil {
			break
		}
		if e == unix.EAGAIN || (e == 0 && n == 0) {
			break
		}
		if e != 0 {
			if transient(e) {
				continue
			}
			break
		}
		r.handle(n) // past the hard stop it counts the records as dropped
	}
	_ = r.raw.Control(func(fd uintptr) { r.reconcileDrops(int(fd)) })
	r.flushDrops()
	return r.submit()
}

// handle encodes the n datagrams the last recvmmsg call returned and submits.
func (r *Receiver) handle(n int) error {
	now := time.Now()
	r.meta.RecvNS = now.UnixNano()
	// Identities are confirmed after the batch was read (see source).
	r.readAt, r.peerFresh = now, false
	r.calls.Add(1)
	r.datagrams.Add(uint64(n))
	r.batchSizes[min(bits.Len(uint(n-1)), 7)].Add(1)
	for i := 0; i < n; i++ {
		m := &r.msgs[i]
		ln := int(m.Len)
		r.out.Received(ln)
		trunc := m.Hdr.Flags&unix.MSG_TRUNC != 0
		if ln > r.slot {
			r.d.Metrics.DropBytes(metrics.CauseOversize, ln-r.slot)
			ln, trunc = r.slot, true
		}
		if m.Hdr.Controllen > 0 || r.cfg.Creds {
			r.control(i, m)
		}
		if m.Hdr.Flags&unix.MSG_CTRUNC != 0 && !r.warnedCtrunc {
			r.warnedCtrunc = true
			r.d.Log.Warn("datagram control data truncated (unexpected ancillary data, e.g. SCM_RIGHTS)", "listener", r.cfg.Meta.Listener)
		}
		if r.names != nil {
			r.source(i, int(m.Hdr.Namelen))
		}
		if trunc {
			r.truncated.Add(1)
		}
		// Past the hard stop the sink counts the rest of the vector as
		// dropped: every datagram read is accounted for.
		r.out.Message(r.data[i*r.slot:i*r.slot+ln], r.slot, trunc, &r.meta)
	}
	r.trim(n)
	return r.submit()
}

// trim gives back the pages long datagrams touched beyond the first page
// of their slots (their records are encoded by now), and sets how many
// datagrams the next call asks for: a full vector while datagrams are
// short, bigVlen while they are long, so that one call touches at most
// Options.DgramVector of slots.
func (r *Receiver) trim(n int) {
	r.vlen = r.vec
	for i := 0; i < n; i++ {
		ln := min(int(r.msgs[i].Len), r.slot)
		if ln <= pageSize {
			continue
		}
		r.vlen = r.bigVlen
		if r.mapped {
			end := min((ln+pageSize-1)&^(pageSize-1), r.slot)
			_ = unix.Madvise(r.data[i*r.slot+pageSize:i*r.slot+end], unix.MADV_DONTNEED)
		}
	}
}

// submit hands the records read so far to the pipeline and adds the
// kernel's drops to the metrics.
func (r *Receiver) submit() error {
	r.flushDrops()
	if err := r.out.Flush(); err != nil {
		return fmt.Errorf("dgram: submit %s: %w", r.cfg.Meta.Listener, err)
	}
	return nil
}

func (r *Receiver) flushDrops() {
	if r.pendingDrops > 0 {
		r.d.Metrics.Drop(metrics.CauseKernelOverflow, r.pendingDrops)
		r.drops.Add(uint64(r.pendingDrops))
		r.pendingDrops = 0
	}
}

// noteDrops takes a reading of the kernel's cumulative drop counter. Readings
// can arrive out of order (a datagram queued before a SO_MEMINFO reading is
// read after it), so only increases count.
func (r *Receiver) noteDrops(v uint32) {
	if d := int32(v - r.lastDrops); d > 0 {
		r.lastDrops = v
		r.pendingDrops += int(d)
	}
}

func (r *Receiver) reconcileDrops(fd int) {
	if r.noMeminfo {
		return
	}
	if v, ok := socketDrops(fd); ok {
		r.noteDrops(v)
	}
}

// socketDrops reads sk_drops via getsockopt(SO_MEMINFO).
func socketDrops(fd int) (uint32, bool) {
	var mem [16]uint32
	l := uint32(unsafe.Sizeof(mem))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 || l < (unix.SK_MEMINFO_DROPS+1)*4 {
		return 0, false
	}
	return mem[unix.SK_MEMINFO_DROPS], true
}

// control parses message i's ancillary data.
func (r *Receiver) control(i int, m *unix.Mmsghdr) {
	ctrl := r.ctrl[i*ctrlSize : i*ctrlSize+min(int(m.Hdr.Controllen), ctrlSize)]
	sawCreds := false
	for len(ctrl) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&ctrl[0]))
		hl := int(h.Len)
		if hl < unix.SizeofCmsghdr || hl > len(ctrl) {
			break
		}
		data := ctrl[unix.CmsgLen(0):hl]
		if h.Level == unix.SOL_SOCKET {
			switch h.Type {
			case unix.SCM_CREDENTIALS:
				// pid 0: the kernel attached no credentials when the
				// datagram was sent, because neither socket had
				// SO_PASSCRED then (it was queued before we set it: the
				// datagram that started us under socket activation, unless
				// the unit says PassCredentials=yes); uid and gid are then
				// the overflow ids (65534), nobody's identity.
				if len(data) >= unix.SizeofUcred && binary.NativeEndian.Uint32(data) != 0 {
					sawCreds = true
					r.creds(int32(binary.NativeEndian.Uint32(data)), binary.NativeEndian.Uint32(data[4:]), binary.NativeEndian.Uint32(data[8:]))
				}
			case unix.SO_RXQ_OVFL:
				if len(data) >= 4 {
					r.noteDrops(binary.NativeEndian.Uint32(data))
				}
			case unix.SCM_RIGHTS:
				// Anyone may send us descriptors; never keep them.
				for ; len(data) >= 4; data = data[4:] {
					_ = unix.Close(int(int32(binary.NativeEndian.Uint32(data))))
					r.fdsClosed.Add(1)
				}
			}
		}
		adv := unix.CmsgSpace(hl - unix.CmsgLen(0))
		if adv > len(ctrl) {
			break
		}
		ctrl = ctrl[adv:]
	}
	if r.cfg.Creds && !sawCreds && r.meta.Peer.HasCreds {
		r.meta.Peer = record.Peer{}
		r.meta.Prepare()
	}
}

// creds updates the metadata when the sender differs from the previous
// datagram's; consecutive datagrams from one sender cost nothing.
func (r *Receiver) creds(pid int32, uid, gid uint32) {
	p := &r.meta.Peer
	if p.HasCreds && p.PID == pid && p.UID == uid && p.GID == gid {
		return
	}
	*p = record.Peer{HasCreds: true, PID: pid, UID: uid, GID: gid, Via: viaKernel}
	r.meta.Prepare()
}

// source updates Peer from message i's source address. The sender's
// identity is asked of the cache at the first datagram of each batch and at
// every change of source, never per datagram of one source.
func (r *Receiver) source(i, namelen int) {
	name := r.names[i*nameSize : i*nameSize+min(namelen, nameSize)]
	var k addrKey
	copy(k[:], name)
	if r.haveKey && k == r.lastKey && r.peerFresh {
		return
	}
	a, ok := r.addrCache[k]
	if !ok {
		a.s = renderAddr(name)
		if ap, err := netip.ParseAddrPort(a.s); err == nil {
			a.ap, a.lookup = ap, ap.Addr().IsLoopback() && r.local.IsValid()
		}
		if len(r.addrCache) >= addrCacheMax {
			clear(r.addrCache)
		}
		r.addrCache[k] = a
	}
	r.lastKey, r.haveKey, r.peerFresh = k, true, true
	peer := record.Peer{Addr: a.s}
	if a.lookup {
		peer = r.peers.Lookup(r.local, a.ap, r.readAt)
	}
	if peer != r.meta.Peer {
		r.meta.Peer = peer
		r.meta.Prepare()
	}
}

func renderAddr(name []byte) string {
	if len(name) < 2 {
		return ""
	}
	switch binary.NativeEndian.Uint16(name) {
	case unix.AF_INET:
		if len(name) >= unix.SizeofSockaddrInet4 {
			port := binary.BigEndian.Uint16(name[2:])
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte(name[4:8])), port).String()
		}
	case unix.AF_INET6:
		if len(name) >= unix.SizeofSockaddrInet6 {
			port := binary.BigEndian.Uint16(name[2:])
			return netip.AddrPortFrom(netip.AddrFrom16([16]byte(name[8:24])).Unmap(), port).String()
		}
	}
	return ""
}

// Close closes the socket. It is safe to call more than once and after Run.
func (r *Receiver) Close() error {
	r.closeOnce.Do(func() {
		r.d.Memory().Add(metrics.MemDatagramVectors, -r.held)
		if r.mapped {
			defer unix.Munmap(r.data) // after the socket: nothing reads into it any more
		}
		if r.peers != nil {
			r.peers.Close()
		}
		if r.detached != nil {
			r.closeErr = r.detached.close()
		}
		// Detached, the Conn was closed already.
		if err := r.cfg.Conn.Close(); err != nil && !errors.Is(err, os.ErrClosed) && !errors.Is(err, net.ErrClosed) && r.closeErr == nil {
			r.closeErr = err
		}
	})
	return r.closeErr
}

// Stats returns a snapshot of the counters; safe from any goroutine.
func (r *Receiver) Stats() Stats {
	s := Stats{
		Calls: r.calls.Load(), Datagrams: r.datagrams.Load(), Truncated: r.truncated.Load(),
		Drops: r.drops.Load(), FDsClosed: r.fdsClosed.Load(),
		RcvBuf: r.rcvbuf, Vec: r.vec, Slot: r.slot, Forced: r.forced,
	}
	for i := range s.BatchSizes {
		s.BatchSizes[i] = r.batchSizes[i].Load()
	}
	return s
}
