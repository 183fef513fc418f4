package stream

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/ackwire"
)

// The acknowledged mode (package ackwire): a connection whose first line is
// ackwire.Hello is told, on the same socket, how many of its bytes have
// their records in the output. Each batch carries, per acknowledged
// connection in it, that connection's count of bytes read up to its last
// record in the batch (a pipeline.Completion); the writer calls Written
// after the batch's write(2), and the connection's loop sends the newest
// count. Connections without the hello cost one test of a bool per frame.

// acker is the acknowledged mode of one connection.
type acker struct {
	c    *conn
	read uint64 // loop: bytes after the hello consumed by frames so far

	written atomic.Uint64 // the newest count written (writer goroutine)
	queued  atomic.Bool   // a send is queued on the loop
	sendFn  func()        // a.send, bound once

	sent     uint64    // loop: the count the client was last sent
	started  bool      // loop: the first acknowledgement (0) was sent
	pend     []byte    // loop: the part of an acknowledgement the socket did not take
	lastSend time.Time // loop: when the last acknowledgement was written
	timerSet bool      // loop: a later send is scheduled (queued stays set meanwhile)
	timerFn  func()
	closing  bool // loop: close the connection once read is acknowledged

	// mu orders Written's loop.Do against the connection's close: the
	// loop cannot stop (and its wake-up fd be reused) while a connection
	// is open, and Written does nothing once it is closed.
	mu     sync.Mutex
	closed bool
}

// startAck turns the acknowledged mode on (loop goroutine) and confirms it
// with an acknowledgement of 0.
func (c *conn) startAck() {
	c.ack = &acker{c: c}
	c.ack.sendFn = c.ack.send
	c.ack.timerFn = func() { c.ack.timerSet = false; c.ack.send() }
	c.ack.pend = make([]byte, 0, ackwire.Size)
	c.ack.queue(0)
}

// Written implements pipeline.Completer (writer goroutine).
func (a *acker) Written(mark uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	a.written.Store(mark)
	if !a.queued.Swap(true) {
		a.c.loop.Do(a.sendFn)
	}
}

// queue sends mark from the loop goroutine itself.
func (a *acker) queue(mark uint64) {
	a.written.Store(mark)
	a.send()
}

// ackEvery is the shortest interval between two acknowledgements of one
// connection. Without it a busy connection was acknowledged after nearly
// every write of the output (on TCP, read without coalescing, one per few
// records): a write(2) for the aggregator and a wake-up of the client's
// reader each, which halved a TCP producer's records/s (four producers:
// 182k against 333k without acknowledgements, with an exception for a
// count that covered everything read, which a fast aggregator nearly
// always sends; 322k against 341k with this plain limit). A record after
// a quiet spell is acknowledged at once; under load an acknowledgement
// waits at most this long, and so does a client's Close.
var ackEvery = time.Millisecond

// send writes the newest count to the client (loop goroutine). A socket
// that takes nothing (a client that does not read its acknowledgements)
// is tried again later; counts that were never sent are simply covered by
// the next one.
func (a *acker) send() {
	if a.c.closed {
		a.queued.Store(false)
		return
	}
	if wait := ackEvery - time.Since(a.lastSend); a.started && wait > 0 {
		// Too soon: send later, and keep queued set so that Written
		// does not queue another send meanwhile.
		if !a.timerSet {
			a.timerSet = true
			a.c.loop.After(wait, a.timerFn)
		}
		return
	}
	// Cleared before the count is loaded: a Written that finds queued
	// still set stored its count before, and this send sees it.
	a.queued.Store(false)
	a.lastSend = time.Now()
	for {
		if len(a.pend) == 0 {
			m := a.written.Load()
			if a.started && m <= a.sent {
				if a.closing && a.sent >= a.read {
					a.c.close()
				}
				return
			}
			a.pend = a.pend[:ackwire.Size]
			ackwire.Put(a.pend, m)
			a.sent, a.started = m, true
		}
		n, err := unix.Write(a.c.fd, a.pend)
		if n > 0 {
			a.pend = a.pend[:copy(a.pend, a.pend[n:])]
			continue
		}
		if (err == unix.EAGAIN || err == unix.EINTR) && !a.timerSet {
			a.timerSet = true
			a.c.loop.After(10*time.Millisecond, a.timerFn)
		}
		return // EPIPE and the like: the read side sees the end
	}
}

// closeOnceAcked is the end of a draining connection (loop goroutine):
// unless everything read is acknowledged already, it stops watching the
// socket (at EOF it would be ready every round) and leaves the close to
// the send that acknowledges the last byte read. It reports whether it
// did so.
func (a *acker) closeOnceAcked() bool {
	if a.started && a.sent >= a.read && len(a.pend) == 0 {
		return false
	}
	a.closing = true
	a.c.loop.Remove(a.c.reg)
	return true
}

// close stops acknowledgements (loop goroutine, from conn.close).
func (a *acker) close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
}
