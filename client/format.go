package client

import (
	"strconv"
	"strings"
	"time"

	"github.com/ipclab/logagg/internal/jsonstr"
	"github.com/ipclab/logagg/internal/seqstamp"
)

// appendJSONString appends s as a JSON string literal (with quotes).
// Invalid UTF-8 becomes U+FFFD so the output is always valid JSON.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = jsonstr.AppendEscapedString(dst, s)
	return append(dst, '"')
}

// appendTextLine appends s with CR and LF replaced by spaces: in the text
// formats a newline ends the record, so an embedded one would split it.
func appendTextLine(dst []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' || s[i] == '\r' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, ' ')
			start = i + 1
		}
	}
	return append(dst, s[start:]...)
}

// severity maps a level name to a syslog severity (RFC 5424 table 2).
// Unknown names are informational.
func severity(level string) int {
	switch strings.ToUpper(level) {
	case "EMERG", "EMERGENCY", "PANIC", "FATAL":
		return 0
	case "ALERT":
		return 1
	case "CRIT", "CRITICAL":
		return 2
	case "ERR", "ERROR":
		return 3
	case "WARN", "WARNING":
		return 4
	case "NOTICE":
		return 5
	case "DEBUG", "TRACE":
		return 7
	default:
		return 6
	}
}

const facilityUser = 1

// formatter holds the per-Writer constants that every record repeats, so
// formatting a record is appends into a reused buffer and nothing else.
type formatter struct {
	format Format
	// local omits the hostname from RFC 3164 records, as glibc's syslog(3)
	// does on the local log socket (unix datagram), where receivers do not
	// expect one (rsyslog's imuxsock, our unixgram listener).
	local bool
	// keepNewlines keeps newlines in text records: on message transports a
	// message is one record, so a multi-line message stays whole.
	keepNewlines bool

	sourceJSON []byte // `{"source":"…","timestamp":"`
	host, tag  string
	pid        string
	seqID      string
	seq        uint64
	ts         timestampCache
}

// timestampCache formats RFC 3339 timestamps with nanoseconds, exactly as
// time.RFC3339Nano does, reusing the date, time and zone of the last second
// seen: a producer sends many records per second, and the full
// AppendFormat was a sixth of a flat-out shm producer's CPU.
type timestampCache struct {
	sec    int64
	loc    *time.Location
	prefix []byte // "2006-01-02T15:04:05"
	zone   []byte // "Z" or "-07:00"
}

func (c *timestampCache) appendRFC3339Nano(dst []byte, t time.Time) []byte {
	if sec := t.Unix(); c.prefix == nil || sec != c.sec || t.Location() != c.loc {
		// The offset of a zone is constant within a second.
		c.prefix = t.AppendFormat(c.prefix[:0], "2006-01-02T15:04:05")
		c.zone = t.AppendFormat(c.zone[:0], "Z07:00")
		c.sec, c.loc = sec, t.Location()
	}
	dst = append(dst, c.prefix...)
	if ns := t.Nanosecond(); ns != 0 {
		var frac [10]byte
		frac[0] = '.'
		for i := 9; i >= 1; i-- {
			frac[i] = byte('0' + ns%10)
			ns /= 10
		}
		n := 10
		for frac[n-1] == '0' { // RFC3339Nano drops trailing zeros
			n--
		}
		dst = append(dst, frac[:n]...)
	}
	return append(dst, c.zone...)
}

func newFormatter(c *config) formatter {
	f := formatter{format: c.format, host: c.hostname, tag: c.source, pid: strconv.Itoa(osGetpid()), seqID: c.seqID}
	if f.tag == "" {
		f.tag = "-"
	}
	if f.host == "" {
		f.host = "-"
	}
	f.sourceJSON = append(f.sourceJSON, `{"source":`...)
	f.sourceJSON = appendJSONString(f.sourceJSON, c.source)
	return f
}

// nextStamp returns the next sequence stamp; ok is false when stamping is off.
func (f *formatter) nextStamp(now time.Time) (seqstamp.Stamp, bool) {
	if f.seqID == "" {
		return seqstamp.Stamp{}, false
	}
	f.seq++
	return seqstamp.Stamp{Producer: f.seqID, Seq: f.seq, SentNS: now.UnixNano()}, true
}

// appendRecord appends one complete record, newline included.
func (f *formatter) appendRecord(dst []byte, t time.Time, level, msg string) []byte {
	st, stamped := f.nextStamp(t)
	switch f.format {
	case FormatJSON:
		dst = append(dst, f.sourceJSON...)
		dst = append(dst, `,"timestamp":"`...)
		dst = f.ts.appendRFC3339Nano(dst, t)
		dst = append(dst, `","level":`...)
		dst = appendJSONString(dst, level)
		dst = append(dst, `,"message":`...)
		dst = appendJSONString(dst, msg)
		if stamped {
			dst = append(dst, ',')
			dst = seqstamp.AppendJSONFields(dst, st)
		}
		return append(dst, '}', '\n')
	case FormatRFC3164:
		dst = f.appendPRI(dst, level)
		dst = t.AppendFormat(dst, time.Stamp)
		dst = append(dst, ' ')
		if !f.local {
			dst = append(dst, f.host...)
			dst = append(dst, ' ')
		}
		dst = append(dst, f.tag...)
		dst = append(dst, '[')
		dst = append(dst, f.pid...)
		dst = append(dst, "]: "...)
	case FormatRFC5424:
		dst = f.appendPRI(dst, level)
		dst = append(dst, '1', ' ')
		// RFC 5424 allows at most six fractional digits.
		dst = t.AppendFormat(dst, "2006-01-02T15:04:05.000000Z07:00")
		dst = append(dst, ' ')
		dst = append(dst, f.host...)
		dst = append(dst, ' ')
		dst = append(dst, f.tag...)
		dst = append(dst, ' ')
		dst = append(dst, f.pid...)
		dst = append(dst, " - - "...)
	}
	if stamped {
		dst = seqstamp.AppendText(dst, st)
		dst = append(dst, ' ')
	}
	if f.keepNewlines {
		dst = append(dst, msg...)
	} else {
		dst = appendTextLine(dst, msg)
	}
	return append(dst, '\n')
}

func (f *formatter) appendPRI(dst []byte, level string) []byte {
	dst = append(dst, '<')
	dst = strconv.AppendInt(dst, int64(facilityUser*8+severity(level)), 10)
	return append(dst, '>')
}

// appendJSONMembers wraps members (a JSON object body without braces, as
// the slog handler builds it) into a complete record with source and stamp.
func (f *formatter) appendJSONMembers(dst []byte, t time.Time, members []byte) []byte {
	st, stamped := f.nextStamp(t)
	dst = append(dst, f.sourceJSON...)
	if len(members) > 0 {
		dst = append(dst, ',')
		dst = append(dst, members...)
	}
	if stamped {
		dst = append(dst, ',')
		dst = seqstamp.AppendJSONFields(dst, st)
	}
	return append(dst, '}', '\n')
}
