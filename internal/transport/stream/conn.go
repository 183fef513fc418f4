package stream

import (
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/ackwire"
	"github.com/ipclab/logagg/internal/bufpool"
	"github.com/ipclab/logagg/internal/framing"
	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/evloop"
)

// The read path of a connection on an event loop.
//
// A ready connection is read once per round, into the loop's scratch
// buffer when it holds no partial frame (the idle and the usual case), or
// into its own partial buffer, which it holds only while a frame is
// incomplete. Complete frames are encoded into the round's batch (one
// outlet per loop and listener); what remains of an incomplete frame is
// copied into a partial buffer charged to the shared ByteBudget. So an
// idle connection holds no buffer at all, and all of them together hold
// at most the budget: past it, the loop writes out its largest partial
// frames, flagged truncated (the rest follows as continuation).

// partialMin is the smallest partial buffer: room for a typical record and
// the read that completes it.
const partialMin = 4 << 10

// conn is one connection. All fields but srv, fd and slot are owned by
// the loop's goroutine once attach ran.
type conn struct {
	srv  *server
	loop *evloop.Loop
	fd   int
	slot bool // holds one of srv.adm's slots (not one accepted at shutdown)

	reg      evloop.Slot
	out      *outlet
	meta     record.Meta
	frame    framing.Stream
	buf      []byte // the incomplete frame, nil when none
	active   time.Time
	draining bool
	closed   bool
	hot      bool // read every round, out of the epoll set (see Ready)
	// first is true until the connection's first frame: an ackwire.Hello
	// there turns on the acknowledged mode (ack).
	first bool
	ack   *acker
}

// reads counts reads that returned data, for tests (export_test.go).
var reads atomic.Int64

// attach registers the connection with its loop (loop goroutine).
func (c *conn) attach(draining bool) {
	c.out = c.srv.outlet(c.loop)
	reg, err := c.loop.Add(c.fd, c)
	if err != nil {
		// epoll_ctl's ENOMEM, or ENOSPC past fs.epoll.max_user_watches
		// (millions; far beyond RLIMIT_NOFILE on a usual machine): the
		// one resource not reserved before accept.
		c.srv.d.Log.Warn("cannot watch connection", "listener", c.srv.cfg.URL, "err", err)
		c.close()
		return
	}
	c.reg = reg
	c.active = c.out.now()
	c.out.conns[c] = struct{}{}
	if draining {
		c.startDrain()
	}
}

// Ready implements evloop.Handler: one read per round.
//
// With read coalescing (unix stream listeners) a connection that returned
// data is hot until a read finds it empty: the loop reads it every round,
// after the pause, and it is out of the epoll set meanwhile (Loop.Watch),
// so the producer's writes do not run epoll's wake-up callback one by one.
// That is what the per-connection readers this replaced did: read again
// after the pause, and wait in poll(2) only once the socket was empty.
func (c *conn) Ready(uint32) {
	if c.closed {
		return
	}
	room := c.room()
	n, err := unix.Read(c.fd, room)
	coalesce := c.srv.cfg.ReadCoalesce
	switch {
	case n > 0:
		reads.Add(1)
		c.active = c.out.now()
		c.out.received(n)
		c.consume(room[:n], false)
		if c.closed {
			return
		}
		if coalesce > 0 && !c.draining {
			c.setHot(true)
			if n < len(room) {
				c.loop.Pause(coalesce)
			}
		} else if n == len(room) {
			c.loop.More()
		}
	case err == unix.EAGAIN:
		c.setHot(false)
	case err == unix.EINTR:
		// level-triggered, or hot: we are called again
	default: // EOF, or ECONNRESET and friends: the connection is over
		c.finish()
	}
}

// setHot moves the connection between "read every round, out of the epoll
// set" and "read when epoll says so".
func (c *conn) setHot(hot bool) {
	if c.hot == hot {
		return
	}
	if err := c.loop.Watch(c.reg, !hot); err != nil {
		c.srv.d.Log.Warn("connection watch", "listener", c.srv.cfg.URL, "err", err)
		c.finish()
		return
	}
	c.hot = hot
	c.loop.SetHot(c.reg, hot)
}

// room returns where the next read goes: the loop's scratch buffer, or the
// free end of the partial buffer (grown when small).
func (c *conn) room() []byte {
	if c.buf == nil {
		return c.out.scratch
	}
	if cap(c.buf)-len(c.buf) < partialMin && cap(c.buf) < c.srv.maxBuf {
		c.resize(min(2*cap(c.buf), c.srv.maxBuf))
	}
	return c.buf[len(c.buf):cap(c.buf)]
}

// consume frames the bytes just read (p: the new data at the end of the
// partial buffer, or in the scratch buffer) and keeps the incomplete rest.
func (c *conn) consume(p []byte, eof bool) {
	if c.buf != nil {
		c.buf = c.buf[:len(c.buf)+len(p)]
		p = c.buf
	}
	c.keep(c.frameAll(p, eof))
}

// frameAll emits every complete frame of p (at eof, the incomplete rest
// too) and returns what is left.
func (c *conn) frameAll(p []byte, eof bool) []byte {
	for {
		k, payload, flags, emit := c.frame.Next(p, eof)
		if k == 0 {
			return p
		}
		p = p[k:]
		if c.first && emit {
			c.first = false
			if string(payload) == ackwire.Hello {
				c.startAck()
				continue
			}
		}
		if c.ack != nil {
			c.ack.read += uint64(k)
		}
		if emit {
			c.out.emit(payload, &c.meta, flags, c.ack)
		}
	}
}

// keep holds rest, the incomplete frame, in the partial buffer (or frees
// the buffer when there is none), and enforces the budget.
func (c *conn) keep(rest []byte) {
	switch {
	case len(rest) == 0:
		c.buf = c.buf[:0]
		c.resize(0)
		return
	case c.buf == nil:
		c.resize(max(partialMin, 2*len(rest)))
		c.buf = append(c.buf, rest...)
	default:
		c.buf = c.buf[:copy(c.buf, rest)]
		if n := len(c.buf); cap(c.buf) > 16*partialMin && cap(c.buf) > 4*n {
			c.resize(max(partialMin, 2*n)) // do not hold a big buffer for a small rest
		}
	}
	if c.srv.budget.Over() {
		c.out.partials.enforce(c.srv.budget)
	}
}

// resize moves the partial frame into a buffer of capacity about n (0:
// none), keeping the budget's count of held bytes and the loop's set of
// connections holding one.
func (c *conn) resize(n int) {
	if n > 0 {
		n = bufCapacity(n, c.srv.maxBuf)
	}
	if n == cap(c.buf) && (n > 0) == (c.buf != nil) {
		return
	}
	var nb []byte
	mem := c.srv.d.Memory()
	if n > 0 {
		nb = bufpool.Get(n)[:len(c.buf)]
		copy(nb, c.buf)
		c.srv.budget.Add(int64(cap(nb)))
		mem.Add(metrics.MemPartialFrames, int64(cap(nb)))
	}
	if c.buf != nil {
		c.srv.budget.Add(-int64(cap(c.buf)))
		mem.Add(metrics.MemPartialFrames, -int64(cap(c.buf)))
		bufpool.Put(c.buf)
	}
	c.buf = nb
	if c.out == nil {
		return
	}
	if nb != nil {
		c.out.partials.conns[c] = struct{}{}
	} else {
		delete(c.out.partials.conns, c)
	}
}

// forceOut writes the held partial frame out as a record flagged truncated
// (its rest, when it comes, is a continuation) and frees the buffer.
func (c *conn) forceOut() {
	if len(c.buf) == 0 {
		return
	}
	payload, flags := c.frame.Force(c.buf)
	if c.ack != nil {
		c.ack.read += uint64(len(c.buf))
	}
	c.out.emit(payload, &c.meta, flags, c.ack)
	c.out.forced++
	if r := c.srv.d.Root; r != nil {
		r.MemoryLimited.WithLabelValues(metrics.LimitPartialFrame).Inc()
	}
	c.buf = c.buf[:0]
	c.resize(0)
}

// finish ends the connection: an incomplete frame is written flagged
// partial, then it is closed. A draining connection in the acknowledged
// mode stays open, unread, until everything it sent is acknowledged (or
// the drain deadline), so that its client does not send again what a
// SIGTERM or a reload already wrote.
func (c *conn) finish() {
	if len(c.buf) > 0 {
		c.frameAll(c.buf, true)
		c.buf = c.buf[:0]
	}
	if c.draining && c.ack != nil && c.ack.closeOnceAcked() {
		return
	}
	c.close()
}

// startDrain shuts the read side down (a unix stream peer's next write
// then fails with EPIPE, so every write that succeeded is read before EOF)
// and closes the connection at the drain deadline at the latest.
func (c *conn) startDrain() {
	if c.closed || c.draining {
		return
	}
	c.draining = true
	unix.Shutdown(c.fd, unix.SHUT_RD)
	c.out.drainTimer(c.srv)
}

// close unregisters and closes the connection (loop goroutine).
func (c *conn) close() {
	if c.closed {
		return
	}
	c.closed = true
	if c.ack != nil {
		c.ack.close()
	}
	if c.reg.Valid() {
		c.loop.Remove(c.reg)
	}
	unix.Close(c.fd)
	c.resize(0)
	if c.out != nil {
		delete(c.out.conns, c)
	}
	c.srv.done(c)
}

// outlet is the state one listener keeps on one loop: the batch its
// connections' records go into this round, counters, the scratch buffer
// and its connections there.
type outlet struct {
	srv      *server
	loop     *evloop.Loop
	out      *sink.Emitter
	scratch  []byte
	conns    map[*conn]struct{}
	partials *partialSet
	forced   int       // partial frames written out by the budget since the last warning
	warned   time.Time // when that warning was last logged
	drain    *evloop.Timer
	idle     *evloop.Timer
	clock    time.Time // read once per round
	recvNS   int64
	unhook   func()
}

// outlet returns the listener's outlet on l, creating it (loop goroutine).
func (s *server) outlet(l *evloop.Loop) *outlet {
	return l.Value(s, func() any {
		o := &outlet{
			srv: s, loop: l, out: s.d.Sink.Emitter(s.d.Metrics), scratch: make([]byte, readSize),
			conns:    map[*conn]struct{}{},
			partials: l.Value(s.budget, func() any { return &partialSet{conns: map[*conn]struct{}{}} }).(*partialSet),
		}
		s.d.Memory().Add(metrics.MemReadBuffers, int64(len(o.scratch)))
		o.unhook = l.OnRound(o.endRound)
		if d := s.d.Opts.IdleTimeout; d > 0 {
			o.scheduleIdle(d)
		}
		return o
	}).(*outlet)
}

// now is the round's clock: one time read per round, not per read.
func (o *outlet) now() time.Time {
	if o.clock.IsZero() {
		o.clock = time.Now()
	}
	return o.clock
}

// received counts n bytes read and stamps the round's receive time.
func (o *outlet) received(n int) {
	o.out.Received(n)
	if o.recvNS == 0 {
		o.recvNS = o.now().UnixNano()
	}
}

// emit hands one record to the sink; ack is the connection's acker in the
// acknowledged mode (else nil), whose count of bytes read then rides with
// the batch holding the record.
func (o *outlet) emit(payload []byte, meta *record.Meta, flags record.Flags, ack *acker) {
	meta.RecvNS = o.recvNS
	if meta.RecvNS == 0 {
		meta.RecvNS = o.now().UnixNano()
	}
	if o.out.Emit(payload, meta, flags) && ack != nil {
		o.out.Done(pipeline.Completion{To: ack, Mark: ack.read})
	}
}

// submit hands the round's records to the pipeline. It blocks while the
// queue is full: the loop stops reading, and producers block in write(2).
func (o *outlet) submit() { o.out.Flush() }

// endRound submits the round's records; it is the loop's round hook.
func (o *outlet) endRound() {
	o.submit()
	if o.forced > 0 && time.Since(o.warned) > 10*time.Second {
		o.srv.d.Log.Warn("partial frames written out, flagged truncated: the memory budget for incomplete frames is exhausted",
			"listener", o.srv.cfg.URL, "frames", o.forced, "budget_bytes", o.srv.budget.Limit())
		o.forced, o.warned = 0, time.Now()
	}
	o.clock, o.recvNS = time.Time{}, 0
}

// drainTimer closes the listener's connections on this loop at the drain
// deadline, if they have not reached EOF by then.
func (o *outlet) drainTimer(s *server) {
	if o.drain != nil {
		return
	}
	s.mu.Lock()
	end := s.drainEnd
	s.mu.Unlock()
	o.drain = o.loop.After(time.Until(end), func() {
		for c := range o.conns {
			if c.draining {
				c.finish()
				c.close() // one still waiting for its acknowledgement too
			}
		}
		o.drain = nil
	})
}

// scheduleIdle closes connections that sent nothing for d, checking every
// d/4 (at most every second).
func (o *outlet) scheduleIdle(d time.Duration) {
	every := min(max(d/4, 10*time.Millisecond), time.Second)
	o.idle = o.loop.After(every, func() {
		cut := time.Now().Add(-d)
		for c := range o.conns {
			if !c.draining && c.active.Before(cut) {
				c.finish()
			}
		}
		o.scheduleIdle(d)
	})
}

// partialSet is the connections of one loop that hold a partial frame,
// across listeners sharing a budget.
type partialSet struct {
	conns map[*conn]struct{}
	order []*conn
}

// enforce writes out this loop's largest partial frames until the budget
// holds again or none is left.
func (ps *partialSet) enforce(b *transport.ByteBudget) {
	ps.order = ps.order[:0]
	for c := range ps.conns {
		ps.order = append(ps.order, c)
	}
	slices.SortFunc(ps.order, func(a, b *conn) int { return len(b.buf) - len(a.buf) })
	for _, c := range ps.order {
		if !b.Over() {
			break
		}
		c.forceOut()
	}
	clear(ps.order)
}

// bufCapacity is the buffer size for n bytes: the next power of two (the
// sizes bufpool lends), but never more than max, the largest frame the
// framer waits for.
func bufCapacity(n, max int) int { return min(bufpool.Size(n), max) }
