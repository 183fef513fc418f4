package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// ErrClosed is returned by every method of a Writer after Close.
	ErrClosed = errors.New("client: writer closed")
	// ErrBadURL wraps every URL the client cannot use.
	ErrBadURL = errors.New("client: bad URL")
	// ErrNotConnected is returned when the connection was lost and
	// reconnecting is off or gave up.
	ErrNotConnected = errors.New("client: not connected")
)

// DialError is returned by Dial when the first connection cannot be made.
// Err is the transport's own error (for example "dial unix /tmp/log.sock:
// connect: no such file or directory").
type DialError struct {
	URL string
	Err error
}

func (e *DialError) Error() string { return "client: dial " + e.URL + ": " + e.Err.Error() }
func (e *DialError) Unwrap() error { return e.Err }

// Writer sends records to one aggregator listener. All methods are safe for
// concurrent use; records from concurrent callers are never interleaved.
type Writer struct {
	cfg    config
	url    *url.URL
	rawURL string
	dial   DialFunc
	// trusted are the users the aggregator may run as: every connection,
	// the first and each redial, must be theirs (DialFunc).
	trusted owners

	mu         sync.Mutex
	conn       Conn
	peer       *peerState // nil when the conn cannot report its peer closing
	maxMsg     int        // 0: stream transport
	fmt        formatter
	scratch    []byte // the record being formatted
	out        []byte // stream: from the first not-completely-written record on; message: the packed message
	outRecords int    // message: records in out
	written    int    // stream: bytes of out already handed to conn
	closed     bool
	// The acknowledged mode (ack.go): out starts at the first record not
	// acknowledged; counted is how much of it Sent counts, ackBase the
	// connection's byte offset of out[0].
	counted, ackBase int

	sent, failed, reconnects, writes, bytesSent atomic.Uint64
	undelivered                                 atomic.Uint64 // sent, then given up on at Close (see Delivered)
	delivered                                   atomic.Uint64 // the acknowledged mode: records acknowledged
}

// peerState is set by a goroutine that blocks in Read on a stream conn: the
// aggregator never writes to producers, so any return from Read means the
// peer closed (or reset) and the next write should go to a new connection.
// This matters for TCP, where the first write after the peer closed still
// succeeds and its record would be silently lost.
//
// In the acknowledged mode (WithAck) the same goroutine reads the
// aggregator's acknowledgements (readAcks).
type peerState struct {
	gone atomic.Bool
	// The acknowledged mode: the newest count of bytes acknowledged,
	// first closed at the first acknowledgement, signal poked at each.
	acked     atomic.Uint64
	confirmed atomic.Bool
	first     chan struct{}
	signal    chan struct{}
}

// Dial connects to the listener at rawURL (unix, unixgram, tcp, udp, fifo,
// and any scheme another file of this package registers). The first
// connection is not retried: an error here means the aggregator is not
// there, and the caller should say so.
func Dial(rawURL string, opts ...Option) (*Writer, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrBadURL, rawURL, err)
	}
	dial, err := lookupDialer(u.Scheme)
	if err != nil {
		return nil, err
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.ctx.Err(); err != nil {
		return nil, &DialError{URL: rawURL, Err: err}
	}
	w := &Writer{cfg: cfg, url: u, rawURL: rawURL, dial: dial, trusted: append(defaultTrusted(), cfg.trusted...), fmt: newFormatter(&cfg)}
	if err := w.connect(); err != nil {
		return nil, &DialError{URL: rawURL, Err: err}
	}
	w.out = make([]byte, 0, max(cfg.buffer, 512)+512)
	w.scratch = make([]byte, 0, 512)
	return w, nil
}

func (w *Writer) connect() error {
	c, maxMsg, err := w.dial(w.url, w.trusted)
	if err != nil {
		return err
	}
	w.adopt(c, maxMsg)
	if w.cfg.ack {
		if err := w.startAck(c); err != nil {
			c.Close()
			w.conn, w.peer = nil, nil
			return err
		}
	}
	return nil
}

// adopt makes c, just dialed, the Writer's connection.
func (w *Writer) adopt(c Conn, maxMsg int) {
	if w.cfg.maxMessage > 0 && maxMsg > 0 {
		maxMsg = w.cfg.maxMessage
	}
	w.conn, w.maxMsg, w.peer = c, maxMsg, nil
	w.fmt.keepNewlines = maxMsg > 0
	w.fmt.local = w.url.Scheme == "unixgram"
	if r, ok := c.(net.Conn); ok && maxMsg == 0 && !w.cfg.ack { // startAck reads acks instead
		ps := &peerState{}
		w.peer = ps
		go watchPeer(r, ps)
	}
}

func watchPeer(r io.Reader, ps *peerState) {
	var b [64]byte
	for {
		if _, err := r.Read(b[:]); err != nil {
			ps.gone.Store(true)
			return
		}
	}
}

// URL returns the URL the Writer was dialed with.
func (w *Writer) URL() string { return w.rawURL }

// Sent is the number of records completely handed to the kernel (or the
// transport). Records still in the buffer are not counted yet.
func (w *Writer) Sent() uint64 { return w.sent.Load() }

// Delivered is the number of records the aggregator is known to hold, or
// at least not known to have lost. In the acknowledged mode (WithAck) it
// is the records the aggregator acknowledged as written. On shm with WithReconnect, after Close,
// it is Sent less the records still in frames the aggregator never
// released (Close counts those as Failed as well); on other transports it
// is Sent.
func (w *Writer) Delivered() uint64 {
	if w.cfg.ack {
		return w.delivered.Load()
	}
	return w.sent.Load() - w.undelivered.Load()
}

// Failed is the number of records dropped because a write failed and could
// not be retried.
func (w *Writer) Failed() uint64 { return w.failed.Load() }

// Reconnects is the number of successful redials.
func (w *Writer) Reconnects() uint64 { return w.reconnects.Load() }

// Writes is the number of Write calls made on the transport, which for the
// socket and FIFO transports is the number of write syscalls.
func (w *Writer) Writes() uint64 { return w.writes.Load() }

// BytesSent is the number of bytes of the records counted by Sent.
func (w *Writer) BytesSent() uint64 { return w.bytesSent.Load() }

// Log sends one record with the current time. level is a name such as
// "INFO" or "ERROR" (syslog formats map it to a severity).
func (w *Writer) Log(level, message string) error {
	return w.WriteRecord(time.Now(), level, message)
}

// WriteRecord sends one record with an explicit timestamp.
func (w *Writer) WriteRecord(t time.Time, level, message string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		w.failed.Add(1)
		return ErrClosed
	}
	w.scratch = w.fmt.appendRecord(w.scratch[:0], t, level, message)
	return w.sendLocked(w.scratch, 1)
}

// EncodedLen is the size in bytes of the record WriteRecord would send now
// for level and message (the seq stamp's digits can make later ones a few
// bytes longer). Producers use it to pad records to a target size.
func (w *Writer) EncodedLen(level, message string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	saved := w.fmt.seq
	n := len(w.fmt.appendRecord(w.scratch[:0], time.Now(), level, message))
	w.fmt.seq = saved
	return n
}

// writeJSONMembers sends {"source":…,<members>,<stamp>}: the slog handler
// builds members; the Writer adds what it owns.
func (w *Writer) writeJSONMembers(t time.Time, members []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		w.failed.Add(1)
		return ErrClosed
	}
	w.scratch = w.fmt.appendJSONMembers(w.scratch[:0], t, members)
	return w.sendLocked(w.scratch, 1)
}

// Write sends pre-formatted records as they are: p holds one or more lines,
// each a record; a final newline is added if missing. Records sent this way
// are not stamped with WithSeq. On message transports several lines go in
// one message as an RFC 7464 sequence, which the aggregator reads as
// separate records.
func (w *Writer) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		w.failed.Add(uint64(countRecords(p)))
		return 0, ErrClosed
	}
	rec := p
	if p[len(p)-1] != '\n' {
		w.scratch = append(append(w.scratch[:0], p...), '\n')
		rec = w.scratch
	}
	records := 0 // streams count records as they are written (commit)
	if w.maxMsg > 0 {
		records = countRecords(rec)
	}
	if err := w.sendLocked(rec, records); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes everything buffered.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	return w.flushLocked()
}

// Close flushes and closes the connection. Later calls return ErrClosed.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	err := w.flushLocked()
	if err == nil && w.cfg.ack && w.conn != nil {
		if err = w.awaitAcks(0, time.Now().Add(w.cfg.giveUp)); err != nil {
			w.failed.Add(uint64(countRecords(w.out)))
		}
	}
	if err == nil {
		err = w.awaitDelivered()
	}
	w.closed = true
	if w.conn != nil {
		if cerr := w.conn.Close(); err == nil && cerr != nil && !errors.Is(cerr, net.ErrClosed) {
			err = cerr
		}
		w.conn = nil
	}
	return err
}

func (w *Writer) flushLocked() error {
	if w.maxMsg > 0 {
		if len(w.out) == 0 {
			return nil
		}
		return w.sendMessage(w.out, w.outRecords)
	}
	return w.pump(true)
}

// sendLocked queues or sends rec, which holds records complete records
// (message transports use the count; streams count what commit writes).
// The count comes from the caller, which knows it, instead of a scan for
// newlines of every message.
//
// A message is one record to the aggregator (newlines included), so a
// message that carries several records is an RFC 7464 sequence: each
// record is preceded by the record separator 0x1E. A record that contains
// that byte itself cannot be packed and goes alone in its own message.
func (w *Writer) sendLocked(rec []byte, records int) error {
	if w.maxMsg == 0 {
		w.out = append(w.out, rec...)
		err := w.pump(false)
		if err == nil && w.cfg.ack && len(w.out) > w.cfg.ackWindow {
			err = w.awaitAcks(w.cfg.ackWindow, time.Time{})
		}
		return err
	}
	if bytes.IndexByte(rec, recordSeparator) >= 0 {
		if err := w.flushLocked(); err != nil {
			return err
		}
		if records == 1 {
			return w.sendMessage(rec, 1)
		}
		return w.sendLines(rec)
	}
	if w.cfg.buffer == 0 && records == 1 {
		return w.sendMessage(rec, 1)
	}
	limit := w.maxMsg
	if w.cfg.buffer > 0 {
		limit = min(w.cfg.buffer, w.maxMsg)
	}
	packed := len(rec) + records // one separator per record
	if len(w.out) > 0 && len(w.out)+packed > limit {
		if err := w.sendMessage(w.out, w.outRecords); err != nil {
			return err
		}
	}
	if records == 1 { // one record, whatever newlines its message holds
		w.out = append(append(w.out, recordSeparator), rec...)
	} else {
		w.out = appendPacked(w.out, rec)
	}
	w.outRecords += records
	if w.cfg.buffer == 0 || len(w.out) >= limit {
		return w.sendMessage(w.out, w.outRecords)
	}
	return nil
}

// recordSeparator starts every record of a packed message (RFC 7464).
const recordSeparator = 0x1e

// appendPacked appends each line of rec (from Write, where lines are
// records) to dst, preceded by the record separator.
func appendPacked(dst, rec []byte) []byte {
	for len(rec) > 0 {
		i := bytes.IndexByte(rec, '\n') + 1
		if i == 0 {
			i = len(rec)
		}
		if i > 1 { // an empty line is not a record
			dst = append(dst, recordSeparator)
			dst = append(dst, rec[:i]...)
		}
		rec = rec[i:]
	}
	return dst
}

// sendLines sends each line of rec as its own message.
func (w *Writer) sendLines(rec []byte) error {
	for len(rec) > 0 {
		i := bytes.IndexByte(rec, '\n') + 1
		if i == 0 {
			i = len(rec)
		}
		if i > 1 {
			if err := w.sendMessage(rec[:i], 1); err != nil {
				return err
			}
		}
		rec = rec[i:]
	}
	return nil
}

// sendMessage sends p, which holds records records, as one message and
// empties the message buffer. Message transports are not reconnected: a
// lost datagram cannot be told from a delivered one anyway.
func (w *Writer) sendMessage(p []byte, records int) error {
	n := uint64(records)
	if w.conn == nil {
		w.out, w.outRecords = w.out[:0], 0
		w.failed.Add(n)
		return ErrNotConnected
	}
	_, err := w.conn.Write(p)
	w.writes.Add(1)
	for err != nil && w.canResume(err) {
		// The aggregator is gone, p not sent: a new one takes over what
		// the old one had not released, then p.
		if err = w.resume(err); err == nil {
			_, err = w.conn.Write(p)
			w.writes.Add(1)
		}
	}
	w.out, w.outRecords = w.out[:0], 0
	if err != nil {
		w.failed.Add(n)
		return fmt.Errorf("client: send to %s: %w", w.rawURL, err)
	}
	w.sent.Add(n)
	w.bytesSent.Add(uint64(len(p)))
	return nil
}

// pump writes the stream buffer: everything when final or unbuffered,
// otherwise whole buffer-sized chunks, so B bytes cost ceil(B/buffer) writes
// as with setvbuf. On a failed write with reconnect on, it redials and
// resends from the start of the first record not completely written.
func (w *Writer) pump(final bool) error {
	for {
		pending := len(w.out) - w.written
		var size int
		switch {
		case pending == 0:
			return nil
		case final || w.cfg.buffer == 0:
			size = pending
		case pending >= w.cfg.buffer:
			size = w.cfg.buffer
		default:
			return nil
		}
		if err := w.ensureConn(); err != nil {
			w.failPending()
			return err
		}
		n, err := w.conn.Write(w.out[w.written : w.written+size])
		w.writes.Add(1)
		w.written += n
		w.commit()
		if err == nil {
			continue
		}
		err = fmt.Errorf("client: write to %s: %w", w.rawURL, err)
		if !w.cfg.reconnect {
			w.failPending()
			return err
		}
		// The bytes of the straddling record already written went to a
		// connection that is gone; send the record again whole (in the
		// acknowledged mode, everything not acknowledged).
		if w.cfg.ack {
			w.lastAcks()
			w.trimAcked(true)
		}
		w.written = 0
		w.conn.Close()
		w.conn = nil
	}
}

// commit drops the records completely written from the front of out (in
// the acknowledged mode, once they are acknowledged: commitAck).
func (w *Writer) commit() {
	if w.cfg.ack {
		w.commitAck()
		return
	}
	k := bytes.LastIndexByte(w.out[:w.written], '\n') + 1
	if k == 0 {
		return
	}
	w.sent.Add(uint64(countRecords(w.out[:k])))
	w.bytesSent.Add(uint64(k))
	w.out = w.out[:copy(w.out, w.out[k:])]
	w.written -= k
}

// failPending counts every record still in out as failed and drops them.
func (w *Writer) failPending() {
	w.failed.Add(uint64(countRecords(w.out)))
	w.out = w.out[:0]
	w.written = 0
}

// ensureConn redials when the connection is known to be gone and
// reconnecting is on.
func (w *Writer) ensureConn() error {
	if w.conn != nil && (w.peer == nil || !w.peer.gone.Load() || !w.cfg.reconnect) {
		return nil
	}
	if !w.cfg.reconnect {
		return ErrNotConnected
	}
	if w.conn != nil {
		w.conn.Close()
		w.conn = nil
	}
	// Whatever was written to the old connection but not acknowledged by
	// a later successful write (or, in the acknowledged mode, by the
	// aggregator) is resent whole (at-least-once).
	if w.cfg.ack {
		w.trimAcked(true)
	}
	w.written = 0
	deadline := time.Now().Add(w.cfg.giveUp)
	wait := w.cfg.backoffMin
	var lastErr error
	for {
		if err := w.connect(); err == nil {
			w.reconnects.Add(1)
			return nil
		} else {
			lastErr = err
		}
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("client: reconnect to %s gave up after %v: %w (%w)", w.rawURL, w.cfg.giveUp, ErrNotConnected, lastErr)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-w.cfg.ctx.Done():
			t.Stop()
			return fmt.Errorf("client: reconnect to %s: %w (%w)", w.rawURL, w.cfg.ctx.Err(), lastErr)
		}
		wait = min(wait*2, w.cfg.backoffMax)
	}
}

// resumer is a message Conn whose messages outlive its peer (shm): the
// aggregator confirms each one once it is written, and until then the
// message stays with the producer, so a new connection can take over
// what a dead peer never confirmed.
type resumer interface {
	Conn
	// peerGone reports whether err (from Write, takeOver or
	// awaitDelivered) means the peer is gone and a new connection may
	// take over.
	peerGone(err error) bool
	// takeOver sends the messages old's peer never confirmed.
	takeOver(old Conn) error
	// awaitDelivered waits until the peer confirmed every message sent,
	// at most d.
	awaitDelivered(d time.Duration) error
	// undelivered counts the records in messages not confirmed.
	undelivered() int
}

func (w *Writer) canResume(err error) bool {
	r, ok := w.conn.(resumer)
	return ok && w.cfg.reconnect && r.peerGone(err)
}

// resume dials a new connection, with backoff, until it has taken over
// what the current one's peer never confirmed; the old connection is then
// closed. cause is why the old one is given up.
func (w *Writer) resume(cause error) error {
	old := w.conn.(resumer)
	deadline := time.Now().Add(w.cfg.giveUp)
	wait := w.cfg.backoffMin
	var lastErr error
	for {
		c, maxMsg, err := w.dial(w.url, w.trusted)
		if err == nil {
			if err = c.(resumer).takeOver(old); err == nil {
				old.Close()
				w.adopt(c, maxMsg)
				w.reconnects.Add(1)
				return nil
			}
			c.Close()
			if !old.peerGone(err) { // the new ring cannot hold them: no point retrying
				return fmt.Errorf("client: %s: taking over unconfirmed records: %w", w.rawURL, err)
			}
		}
		lastErr = err
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("client: reconnect to %s (lost: %w) gave up after %v: %w (%w)", w.rawURL, cause, w.cfg.giveUp, ErrNotConnected, lastErr)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-w.cfg.ctx.Done():
			t.Stop()
			return fmt.Errorf("client: reconnect to %s: %w (%w)", w.rawURL, w.cfg.ctx.Err(), lastErr)
		}
		wait = min(wait*2, w.cfg.backoffMax)
	}
}

// awaitDelivered waits, at Close, until the peer confirmed every message
// (resumer connections with WithReconnect), taking over on a new
// connection when the peer goes away meanwhile, for at most the reconnect
// give-up time. What is still unconfirmed then counts as failed.
func (w *Writer) awaitDelivered() error {
	r, ok := w.conn.(resumer)
	if !ok || !w.cfg.reconnect {
		return nil
	}
	deadline := time.Now().Add(w.cfg.giveUp)
	for {
		err := r.awaitDelivered(time.Until(deadline))
		if err == nil {
			return nil
		}
		if r.peerGone(err) && time.Now().Before(deadline) {
			if err = w.resume(err); err == nil {
				r = w.conn.(resumer)
				continue
			}
		}
		n := uint64(w.conn.(resumer).undelivered())
		w.undelivered.Add(n)
		w.failed.Add(n)
		return fmt.Errorf("client: %s: %d records sent but not confirmed: %w", w.rawURL, n, err)
	}
}

// countRecords counts newline-terminated records, plus a trailing
// unterminated one.
func countRecords(p []byte) int {
	n := bytes.Count(p, []byte{'\n'})
	if len(p) > 0 && p[len(p)-1] != '\n' {
		n++
	}
	return n
}
