package client

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Format is the wire format of the records a Writer produces.
type Format uint8

const (
	// FormatJSON is one JSON object per line: source, timestamp, level,
	// message (and the seq stamp members when enabled). The default.
	FormatJSON Format = iota
	// FormatRaw is the message text alone, one line per record.
	FormatRaw
	// FormatRFC3164 is BSD syslog: "<PRI>Mmm dd hh:mm:ss host tag[pid]: msg".
	FormatRFC3164
	// FormatRFC5424 is IETF syslog: "<PRI>1 TIMESTAMP HOST APP PROCID - - msg".
	FormatRFC5424
)

// String returns the name ParseFormat accepts.
func (f Format) String() string {
	switch f {
	case FormatRaw:
		return "raw"
	case FormatRFC3164:
		return "rfc3164"
	case FormatRFC5424:
		return "rfc5424"
	default:
		return "json"
	}
}

// ParseFormat maps "json", "raw", "rfc3164" and "rfc5424" to a Format.
func ParseFormat(s string) (Format, error) {
	switch s {
	case "json", "":
		return FormatJSON, nil
	case "raw":
		return FormatRaw, nil
	case "rfc3164":
		return FormatRFC3164, nil
	case "rfc5424":
		return FormatRFC5424, nil
	}
	return 0, fmt.Errorf("client: unknown format %q (want json, raw, rfc3164 or rfc5424)", s)
}

// Option configures Dial. Options are applied in order; later ones win.
type Option func(*config)

type config struct {
	ctx        context.Context
	format     Format
	buffer     int
	source     string
	seqID      string
	reconnect  bool
	backoffMin time.Duration
	backoffMax time.Duration
	giveUp     time.Duration
	maxMessage int
	hostname   string
	ack        bool // WithAck
	ackWindow  int
	trusted    []uint32 // WithAggregatorUID, besides defaultTrusted
}

func defaultConfig() config {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return config{
		ctx:      context.Background(),
		format:   FormatJSON,
		source:   filepath.Base(os.Args[0]),
		giveUp:   10 * time.Second,
		hostname: host,
	}
}

// WithFormat sets the record format. Default FormatJSON.
func WithFormat(f Format) Option { return func(c *config) { c.format = f } }

// WithBuffer sets a user-space write buffer of n bytes, like setvbuf(3) with
// full buffering. Default 0: one Conn.Write (one write syscall) per record.
//
// On stream transports the Writer writes exactly n bytes at a time (records
// may straddle two writes), so moving B bytes costs ceil(B/n) writes. On
// message transports it packs whole records into one message of at most
// min(n, max message size) bytes and never splits a record. Buffered records
// leave only when the buffer fills, on Flush, or on Close.
func WithBuffer(n int) Option {
	return func(c *config) {
		if n < 0 {
			n = 0
		}
		c.buffer = n
	}
}

// WithSource sets the "source" member (json), the tag (rfc3164) or the APP
// field (rfc5424). Default: the program's base name.
func WithSource(name string) Option { return func(c *config) { c.source = name } }

// WithSeq stamps every record with producerID, a sequence number starting
// at 1 and the send time (see internal/seqstamp): as JSON members in json
// format, as "producer_id=… seq=N sent_ns=N " at the start of the message
// text in the other formats. Records passed to Write are not stamped.
// producerID must not need JSON escaping (letters, digits, '-', '_', '.').
func WithSeq(producerID string) Option { return func(c *config) { c.seqID = producerID } }

// WithReconnect makes a stream Writer (unix, tcp, fifo, and any transport
// whose dialer reports max message 0) redial with exponential backoff from
// min to max when a write fails or the peer is seen to close, and resend
// every record that was not completely written. Delivery across a
// reconnect is at-least-once: a record whose bytes were written to the old
// connection but were never read by the aggregator is lost (the kernel had
// accepted it), and the record that straddled the failed write is sent
// again whole, so it can appear twice only if the aggregator kept its
// partial first copy. The Writer gives up after WithReconnectGiveUp
// (default 10s) without a successful dial. Default: no reconnect.
func WithReconnect(min, max time.Duration) Option {
	return func(c *config) {
		if min <= 0 {
			min = 10 * time.Millisecond
		}
		if max < min {
			max = min
		}
		c.reconnect, c.backoffMin, c.backoffMax = true, min, max
	}
}

// WithReconnectGiveUp bounds how long one reconnect attempt sequence may
// last before the write fails. Default 10s.
func WithReconnectGiveUp(d time.Duration) Option { return func(c *config) { c.giveUp = d } }

// WithContext bounds Dial and every reconnect wait: when ctx ends, a pending
// reconnect gives up at once. Default context.Background().
func WithContext(ctx context.Context) Option {
	return func(c *config) {
		if ctx != nil {
			c.ctx = ctx
		}
	}
}

// WithMaxMessage overrides the largest message a message transport may
// send (the dialer's own limit by default: 65507 for udp, 65536 for
// unixgram). Ignored for stream transports.
func WithMaxMessage(n int) Option { return func(c *config) { c.maxMessage = n } }

// WithHostname overrides the HOST field of syslog formats. Default os.Hostname().
func WithHostname(h string) Option { return func(c *config) { c.hostname = h } }
