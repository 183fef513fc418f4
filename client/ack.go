package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/ipclab/logagg/internal/ackwire"
)

// The acknowledged mode of stream sockets (WithAck; the wire protocol is
// package internal/ackwire). The Writer keeps every record it wrote in out
// until the aggregator acknowledges it as written to its output: out then
// starts at the first record not acknowledged, written counts the bytes of
// out handed to the current connection, counted those already counted as
// Sent, and ackBase is the connection's byte offset of out[0] (after the
// hello line). After a reconnect everything in out is sent again, so a
// record can arrive twice but is never reported delivered before it is in
// the aggregator's output.

// ErrNoAck is returned by Dial in the acknowledged mode when the listener
// does not confirm the mode (it is not a logagg stream listener, or one
// from before the mode existed).
var ErrNoAck = errors.New("client: the listener does not acknowledge records")

// DefaultAckWindow is the default bound on the bytes of records kept until
// acknowledged.
const DefaultAckWindow = 4 << 20

// ackHandshakeTimeout bounds the wait for the first acknowledgement (a
// variable for tests).
var ackHandshakeTimeout = 5 * time.Second

// WithAck turns on the acknowledged mode on unix stream and TCP sockets:
// the first line of each connection asks the aggregator to acknowledge the
// records it wrote to its output, Delivered counts acknowledged records,
// records not acknowledged are sent again after a reconnect (with
// WithReconnect), and Close waits until every record is acknowledged (at
// most the reconnect give-up time). At most window bytes of records are
// kept unacknowledged; a record that would exceed it blocks the caller
// until acknowledgements make room (backpressure), window <= 0 means
// DefaultAckWindow. Dial fails with ErrNoAck if the listener does not
// confirm the mode. Default: off.
func WithAck(window int) Option {
	return func(c *config) {
		if window <= 0 {
			window = DefaultAckWindow
		}
		c.ack, c.ackWindow = true, window
	}
}

// readAcks reads acknowledgements from the connection until it ends; the
// end means the peer closed or reset it (it sends nothing else).
func readAcks(r io.Reader, ps *peerState) {
	var buf [64 * ackwire.Size]byte
	have := 0
	for {
		n, err := r.Read(buf[have:])
		have += n
		if k := have / ackwire.Size * ackwire.Size; k > 0 {
			ps.acked.Store(ackwire.Get(buf[k-ackwire.Size : k]))
			if ps.confirmed.CompareAndSwap(false, true) {
				close(ps.first)
			}
			have = copy(buf[:], buf[k:have])
			ps.notify()
		}
		if err != nil {
			ps.gone.Store(true)
			ps.notify()
			return
		}
	}
}

// startAck sends the hello on c and waits for the aggregator's first
// acknowledgement.
func (w *Writer) startAck(c Conn) error {
	nc, ok := c.(net.Conn)
	if !ok || w.maxMsg != 0 {
		return fmt.Errorf("%w: the acknowledged mode needs a unix stream or TCP socket, not %s", ErrBadURL, w.url.Scheme)
	}
	ps := &peerState{first: make(chan struct{}), signal: make(chan struct{}, 1)}
	w.peer = ps
	w.ackBase = 0
	go readAcks(nc, ps)
	if _, err := nc.Write([]byte(ackwire.Hello + "\n")); err != nil {
		return err
	}
	t := time.NewTimer(ackHandshakeTimeout)
	defer t.Stop()
	for {
		select {
		case <-ps.first:
			return nil
		case <-ps.signal: // the peer closed before it answered
			if ps.gone.Load() && !ps.confirmed.Load() {
				return fmt.Errorf("client: %s closed the connection before acknowledging the hello", w.rawURL)
			}
		case <-t.C:
			return fmt.Errorf("%w (nothing within %v of the hello)", ErrNoAck, ackHandshakeTimeout)
		case <-w.cfg.ctx.Done():
			return w.cfg.ctx.Err()
		}
	}
}

// commitAck counts the records written completely for the first time as
// sent, and drops what is acknowledged once that is at least half of out.
func (w *Writer) commitAck() {
	if w.written > w.counted {
		if k := bytes.LastIndexByte(w.out[w.counted:w.written], '\n') + 1; k > 0 {
			w.sent.Add(uint64(countRecords(w.out[w.counted : w.counted+k])))
			w.bytesSent.Add(uint64(k))
			w.counted += k
		}
	}
	w.trimAcked(false)
}

// trimAcked drops the acknowledged records from the front of out (when
// force, or when they are at least half of it: each byte is moved a bounded
// number of times) and counts them delivered.
func (w *Writer) trimAcked(force bool) {
	if w.peer == nil {
		return
	}
	pos := int(w.peer.acked.Load()) - w.ackBase
	if pos <= 0 || (!force && 2*pos < len(w.out)) {
		return
	}
	pos = min(pos, w.written)
	k := bytes.LastIndexByte(w.out[:pos], '\n') + 1
	if k == 0 {
		return
	}
	w.delivered.Add(uint64(countRecords(w.out[:k])))
	w.out = w.out[:copy(w.out, w.out[k:])]
	w.written -= k
	w.counted -= k
	w.ackBase += k
}

// lastAckWait bounds lastAcks: a draining aggregator acknowledges what it
// read within milliseconds; a peer that stopped reading without closing
// must not hold the Writer longer than this before it reconnects.
const lastAckWait = 2 * time.Second

// lastAcks waits, after a write to the connection failed, until the peer
// closes it or lastAckWait passes, taking the acknowledgements that still
// arrive. A draining aggregator shuts its read side down (the write fails
// with EPIPE) but acknowledges everything it read before it closes:
// without this wait all of that was sent again after the reconnect.
func (w *Writer) lastAcks() {
	if w.peer == nil {
		return
	}
	t := time.NewTimer(lastAckWait)
	defer t.Stop()
	for !w.peer.gone.Load() {
		select {
		case <-w.peer.signal:
		case <-t.C:
			return
		case <-w.cfg.ctx.Done():
			return
		}
	}
}

// awaitAcks waits until at most limit bytes of records are unacknowledged,
// sending everything again on a new connection when the peer goes away
// (with WithReconnect). A zero deadline waits for as long as it takes (the
// aggregator holds its producers back while its output is stuck).
func (w *Writer) awaitAcks(limit int, deadline time.Time) error {
	for {
		w.trimAcked(true)
		if len(w.out) <= limit {
			return nil
		}
		if w.peer == nil || w.peer.gone.Load() {
			if err := w.ensureConn(); err != nil {
				return err
			}
			if err := w.pump(true); err != nil {
				return err
			}
			continue
		}
		wait := 100 * time.Millisecond
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return fmt.Errorf("client: %s: %d records not acknowledged in time", w.rawURL, countRecords(w.out))
			}
			wait = min(wait, left)
		}
		t := time.NewTimer(wait)
		select {
		case <-w.peer.signal:
		case <-t.C:
		case <-w.cfg.ctx.Done():
			t.Stop()
			return w.cfg.ctx.Err()
		}
		t.Stop()
	}
}

// notify wakes a Writer waiting in awaitAcks.
func (ps *peerState) notify() {
	if ps.signal == nil {
		return
	}
	select {
	case ps.signal <- struct{}{}:
	default:
	}
}
