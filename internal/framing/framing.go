// Package framing decides where one record ends and the next begins, for
// byte streams (unix stream sockets, TCP, FIFOs, pipes) and for messages
// (datagrams, POSIX queue messages, shared-memory ring frames). It knows
// nothing about what a record contains; internal/record decodes it.
//
// The rules follow what rsyslog and syslog-ng do with the same bytes, so
// that every real client is read the way its authors expect (see
// docs/adr/0004-framing-what-rsyslog-and-syslog-ng-do-plus-nul.md):
//
// Streams: a frame ends at a newline or at a NUL byte (as in syslog-ng), or
// is RFC 6587 octet-counted ("LEN <PRI>…", recognised per frame when
// enabled). Python's SysLogHandler ends every message with a NUL and never
// sends a newline, so a stream whose first delimited frame ends with a NUL,
// before any newline, is taken to frame with NUL: from then on only NUL
// ends its frames and a newline is part of the message, so its multi-line
// messages (stack traces) stay one record. A stream whose first delimiter
// is a newline keeps ending frames at both, so a newline sender's stray NUL
// cannot glue its later lines together.
// Empty frames are skipped. A frame longer than the maximum record size is
// not discarded: it is emitted in pieces of at most that size, the first
// flagged truncated, the following ones continuation (and truncated while
// more follows), so no byte is lost and memory per stream stays bounded.
//
// Messages: one message is one record, newlines included, as in rsyslog and
// syslog-ng; one trailing NUL, then one trailing newline, are removed. A
// message that starts with an octet count equal to the length of the rest
// ("57 <166>…", what srslog's RFC5425MessageLengthFramer sends on any
// transport) has the count removed first; rsyslog and syslog-ng keep it,
// making the count the start of a message without a PRI. A
// message that begins with the ASCII record separator (0x1E) is an RFC 7464
// JSON text sequence: every RS starts a record. Our client packs several
// records into one message that way, which no syslog sender can be confused
// with (RFC 3164 and 5424 messages begin with '<').
package framing

import (
	"bytes"

	"github.com/ipclab/logagg/internal/record"
)

// RS is the ASCII record separator that starts every record of an RFC 7464
// sequence packed into one message.
const RS = 0x1e

// OctetHeaderMax is the longest RFC 6587 header accepted: 9 digits and a
// space. A stream buffer needs MaxRecord + OctetHeaderMax + 1 bytes to hold
// any frame the framer waits for.
const OctetHeaderMax = 10

// Stream is the framing state of one byte stream. The zero value frames
// newline/NUL-delimited records without octet counting and without a size
// limit; set MaxRecord and Octet before the first call of Next. A Stream
// belongs to the goroutine that reads the stream.
type Stream struct {
	MaxRecord int  // frames longer than this are emitted in pieces (0 = no limit)
	Octet     bool // accept RFC 6587 octet-counted frames

	mode      mode // decided by the first delimited frame
	octetLeft int  // bytes still to come of an octet-counted frame emitted in pieces
	splitting bool // the next piece continues a delimited frame emitted in pieces
}

type mode uint8

const (
	undecided   mode = iota // no delimited frame yet: newline and NUL end frames
	newlineMode             // newline and NUL end frames
	nulMode                 // only NUL ends frames; newlines are message bytes
)

// NULFraming reports whether the stream has shown that it ends frames with
// NUL (see the package doc).
func (s *Stream) NULFraming() bool { return s.mode == nulMode }

// Reset forgets the state of the current stream (a new connection).
func (s *Stream) Reset() { s.mode, s.octetLeft, s.splitting = undecided, 0, false }

// Next examines the unconsumed bytes p of the stream and returns how many
// of them it consumed (n) and, when emit is true, the record they held:
// payload (a subslice of p, without framing) and the flags the framing
// raised (truncated, continuation, partial, framing). n == 0 means p holds
// no complete frame yet: read more and call again with the longer p. n > 0
// with emit false means framing bytes (delimiters of empty frames) were
// skipped. At eof an incomplete frame is emitted flagged partial.
func (s *Stream) Next(p []byte, eof bool) (n int, payload []byte, flags record.Flags, emit bool) {
	if len(p) == 0 {
		return 0, nil, 0, false
	}
	if s.octetLeft > 0 {
		return s.octetPiece(p, eof)
	}
	if !s.splitting {
		// Skip what separates frames: empty frames, and in NUL framing the
		// newline (or CR LF) some senders put after each NUL.
		i := 0
		for i < len(p) && (p[i] == 0 || p[i] == '\n' || p[i] == '\r' && s.mode == nulMode) {
			i++
		}
		if i > 0 {
			return i, nil, 0, false
		}
		if s.Octet && p[0] >= '0' && p[0] <= '9' {
			switch st, count, hdr := parseOctet(p); st {
			case octNeedMore:
				if !eof {
					return 0, nil, 0, false
				}
			case octBad:
				flags = record.FlagFraming
			case octOK:
				return s.octetFrame(p, count, hdr, eof)
			}
		}
	}
	return s.delimited(p, eof, flags)
}

// delimited frames a record ended by a delimiter.
func (s *Stream) delimited(p []byte, eof bool, flags record.Flags) (int, []byte, record.Flags, bool) {
	if s.splitting {
		flags |= record.FlagContinuation
	}
	// Look one byte past the limit: a delimiter right after MaxRecord
	// bytes ends a frame of exactly MaxRecord.
	look := p
	if s.MaxRecord > 0 && len(look) > s.MaxRecord+1 {
		look = look[:s.MaxRecord+1]
	}
	var end int
	if s.mode == nulMode {
		end = bytes.IndexByte(look, 0)
	} else {
		end = bytes.IndexByte(look, '\n')
		in := look
		if end >= 0 {
			in = look[:end]
		}
		nul := bytes.IndexByte(in, 0)
		if nul >= 0 {
			end = nul
		}
		if s.mode == undecided && end >= 0 {
			s.mode = newlineMode
			if nul >= 0 {
				s.mode = nulMode
			}
		}
	}
	switch {
	case end == 0 && s.splitting:
		// The delimiter right after a piece: the frame ended with it.
		s.splitting = false
		return 1, nil, 0, false
	case end >= 0:
		s.splitting = false
		rec := p[:end]
		if s.mode == nulMode {
			rec = trimNewline(rec)
		}
		return end + 1, rec, flags, true
	case s.MaxRecord > 0 && len(p) > s.MaxRecord:
		s.splitting = true
		return s.MaxRecord, p[:s.MaxRecord], flags | record.FlagTruncated, true
	case eof:
		s.splitting = false
		return len(p), p, flags | record.FlagPartial, true
	}
	return 0, nil, 0, false
}

// octetFrame frames an octet-counted record whose header p[:hdr] announced
// count bytes.
func (s *Stream) octetFrame(p []byte, count, hdr int, eof bool) (int, []byte, record.Flags, bool) {
	body := p[hdr:]
	if s.MaxRecord > 0 && count > s.MaxRecord {
		if len(body) >= s.MaxRecord {
			s.octetLeft = count - s.MaxRecord
			return hdr + s.MaxRecord, body[:s.MaxRecord], record.FlagTruncated, true
		}
		if eof {
			return len(p), body, record.FlagPartial, true
		}
		return 0, nil, 0, false
	}
	if count <= len(body) {
		// Some senders count a trailing newline; framing is not payload.
		return hdr + count, trimNewline(body[:count]), 0, true
	}
	if eof {
		return len(p), body, record.FlagPartial, true
	}
	return 0, nil, 0, false
}

// octetPiece emits the next piece of an octet-counted frame longer than
// MaxRecord.
func (s *Stream) octetPiece(p []byte, eof bool) (int, []byte, record.Flags, bool) {
	k := min(s.octetLeft, len(p), s.MaxRecord)
	flags := record.FlagContinuation
	switch {
	case k == s.octetLeft:
		s.octetLeft = 0
		return k, trimNewline(p[:k]), flags, true
	case k == s.MaxRecord:
		s.octetLeft -= k
		return k, p[:k], flags | record.FlagTruncated, true
	case eof:
		s.octetLeft = 0
		return len(p), p, flags | record.FlagPartial, true
	}
	return 0, nil, 0, false
}

// Force consumes all of p, the start of a frame that is not complete yet,
// as one piece flagged truncated (and continuation if it continues one):
// the rest of the frame, when it arrives, is emitted flagged continuation.
// A reader calls it to stop holding a partial frame (a memory budget, a
// FIFO writer that went away mid-line). An empty p emits nothing.
func (s *Stream) Force(p []byte) (payload []byte, flags record.Flags) {
	if len(p) == 0 {
		return nil, 0
	}
	flags = record.FlagTruncated
	switch {
	case s.octetLeft > 0:
		s.octetLeft -= len(p)
		return p, flags | record.FlagContinuation
	case s.splitting:
		return p, flags | record.FlagContinuation
	}
	if s.Octet && p[0] >= '1' && p[0] <= '9' {
		if st, count, hdr := parseOctet(p); st == octOK && count > len(p)-hdr {
			s.octetLeft = count - (len(p) - hdr)
			return p[hdr:], flags
		}
	}
	s.splitting = true
	return p, flags
}

func trimNewline(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		return b[:n-1]
	}
	return b
}

type octetState uint8

const (
	octNo       octetState = iota // not an octet-counted frame
	octNeedMore                   // cannot tell yet
	octOK                         // count and header length valid
	octBad                        // looks octet-counted, count makes no sense
)

// parseOctet recognises "<1-9 digits> <" at the start of p. Octet counting
// only carries syslog, so requiring '<' keeps plain lines such as "200 OK"
// delimited.
func parseOctet(p []byte) (st octetState, count, hdr int) {
	i := 0
	for i < len(p) && i < OctetHeaderMax && p[i] >= '0' && p[i] <= '9' {
		count = count*10 + int(p[i]-'0')
		i++
	}
	switch {
	case i >= OctetHeaderMax:
		return octNo, 0, 0
	case i == len(p):
		return octNeedMore, 0, 0
	case p[i] != ' ':
		return octNo, 0, 0
	case i+1 == len(p):
		return octNeedMore, 0, 0
	case p[i+1] != '<':
		return octNo, 0, 0
	case p[0] == '0': // count 0 or a leading zero: not a frame RFC 6587 allows
		return octBad, 0, 0
	}
	return octOK, count, i + 1
}

// Message calls fn with every record of one message (see the package doc):
// the whole message, or each record of an RFC 7464 sequence. cut says the
// message is the first part of a longer one (the kernel truncated a
// datagram): its last record is flagged truncated and keeps its trailing
// bytes. Records longer than maxRecord (0 = no limit) are passed in pieces
// flagged like stream pieces. Empty records are skipped.
func Message(p []byte, maxRecord int, cut bool, fn func(rec []byte, flags record.Flags)) {
	var last record.Flags
	if cut {
		last = record.FlagTruncated
	}
	if len(p) == 0 || p[0] != RS {
		if !cut {
			p = trimMessage(octetCounted(p))
		}
		Pieces(p, maxRecord, last, fn)
		return
	}
	for len(p) > 0 {
		p = p[1:] // the RS
		rec := p
		if i := bytes.IndexByte(p, RS); i >= 0 {
			rec, p = p[:i], p[i:]
		} else {
			p = nil
		}
		if len(p) > 0 || !cut {
			Pieces(trimNewline(rec), maxRecord, 0, fn)
		} else {
			Pieces(rec, maxRecord, last, fn)
		}
	}
}

// octetCounted removes an RFC 5425/6587 octet count from the start of a
// message when it counts exactly the bytes after it: a sender framed the
// message for a stream and sent it as a datagram. Only an exact count is
// taken, so no message that merely starts with a number and '<' loses it.
func octetCounted(p []byte) []byte {
	if st, count, hdr := parseOctet(p); st == octOK && count == len(p)-hdr {
		return p[hdr:]
	}
	return p
}

// trimMessage removes one trailing NUL, then one trailing newline: senders
// such as Python's SysLogHandler end datagrams with NUL, others with a
// newline, and neither is part of the message (rsyslog drops both).
func trimMessage(p []byte) []byte {
	if n := len(p); n > 0 && p[n-1] == 0 {
		p = p[:n-1]
	}
	return trimNewline(p)
}

// Pieces calls fn with rec, or with its pieces of at most maxRecord bytes
// when it is longer (0 = no limit): every piece but the last is flagged
// truncated, every piece but the first continuation. in is added to the
// flags of the first piece (e.g. truncated when the kernel cut a datagram).
// An empty rec is skipped.
func Pieces(rec []byte, maxRecord int, in record.Flags, fn func(rec []byte, flags record.Flags)) {
	if len(rec) == 0 {
		return
	}
	var cont record.Flags
	for maxRecord > 0 && len(rec) > maxRecord {
		fn(rec[:maxRecord], in|cont|record.FlagTruncated)
		rec, in, cont = rec[maxRecord:], 0, record.FlagContinuation
	}
	fn(rec, in|cont)
}
