package journal

import (
	"bytes"
	"encoding/base64"
	"strconv"
	"time"

	"github.com/ipclab/logagg/internal/jsonstr"
	"github.com/ipclab/logagg/internal/record"
)

// A journal entry becomes one JSON object, shaped like a syslog record
// (docs/records.md) so that queries and rules written for one read the
// other:
//
//	{"message":MESSAGE, "level":"info", "source":SYSLOG_IDENTIFIER (else _COMM),
//	 "timestamp":_SOURCE_REALTIME_TIMESTAMP (else __REALTIME_TIMESTAMP), RFC 3339 UTC,
//	 "syslog":{"facility":SYSLOG_FACILITY, "severity":PRIORITY, "hostname":_HOSTNAME,
//	           "appname":SYSLOG_IDENTIFIER, "procid":SYSLOG_PID},
//	 "journal":{every other field, by its journal name}}
//
// and _PID, _UID and _GID, which journald itself fills in from the
// sender's credentials, become agg.peer with via "journal". A field is
// left out of "journal" only when its place above holds it exactly: a
// PRIORITY that is not a digit 0-7, a _PID that is not a number, an
// identifier that is not text stay in "journal" as they were. A value
// that is not text (invalid UTF-8, or a control byte other than TAB, LF,
// CR) is {"base64":"..."} in "journal"; MESSAGE is then also the top-level
// message, escaped and flagged as any transport's would be. A field that
// occurs more than once is an array of its values, in order.

// renderer turns entries into record payloads. Not safe for concurrent
// use; it reuses its buffer.
type renderer struct {
	buf  []byte
	keep []bool // per field: whether it goes into "journal"
}

// known fields, by their index in an entry.
type known struct {
	message, priority, facility, ident, syslogPID, hostname, comm int
	pid, uid, gid, realtime, sourceRealtime                       int
}

// rendered is what render found besides the payload.
type rendered struct {
	peer  record.Peer
	flags record.Flags
}

var severityNames = [8]string{"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"}

// render renders e's payload, valid until the next call.
func (r *renderer) render(e *Entry) ([]byte, rendered) {
	var out rendered
	k := known{-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}
	var seen, dups uint64
	if cap(r.keep) < len(e.Fields) {
		r.keep = make([]bool, len(e.Fields))
	}
	keep := r.keep[:len(e.Fields)]
	for i := range e.Fields {
		f := &e.Fields[i]
		keep[i] = true
		if f.Truncated {
			out.flags |= record.FlagTruncated
		}
		bit := uint64(1) << nameBit(f.Name)
		if seen&bit != 0 {
			dups |= bit
		}
		seen |= bit
		var p *int
		switch string(f.Name) {
		case "MESSAGE":
			p = &k.message
		case "PRIORITY":
			p = &k.priority
		case "SYSLOG_FACILITY":
			p = &k.facility
		case "SYSLOG_IDENTIFIER":
			p = &k.ident
		case "SYSLOG_PID":
			p = &k.syslogPID
		case "_HOSTNAME":
			p = &k.hostname
		case "_COMM":
			p = &k.comm
		case "_PID":
			p = &k.pid
		case "_UID":
			p = &k.uid
		case "_GID":
			p = &k.gid
		case "__REALTIME_TIMESTAMP":
			p = &k.realtime
		case "_SOURCE_REALTIME_TIMESTAMP":
			p = &k.sourceRealtime
		default:
			continue
		}
		if *p < 0 {
			*p = i
		}
	}
	if e.Truncated {
		out.flags |= record.FlagTruncated
	}
	val := func(i int) []byte { return e.Fields[i].Value }

	b := append(r.buf[:0], '{')
	sep := func() {
		if len(b) > 1 {
			b = append(b, ',')
		}
	}
	// text appends field i as a string member; the field stays in
	// "journal" too unless it was text (the string holds it exactly).
	text := func(key string, i int, flag bool) {
		sep()
		b = append(b, key...)
		b = append(b, '"')
		var found jsonstr.Found
		b, found = jsonstr.AppendEscaped(b, val(i))
		b = append(b, '"')
		if found == 0 {
			keep[i] = false
		} else if flag {
			out.flags |= foundFlags(found)
		}
	}
	if k.message >= 0 {
		text(`"message":`, k.message, true)
	}
	sev := -1
	if i := k.priority; i >= 0 && len(val(i)) == 1 && val(i)[0] >= '0' && val(i)[0] <= '7' {
		sev = int(val(i)[0] - '0')
		keep[i] = false
		sep()
		b = append(b, `"level":"`...)
		b = append(b, severityNames[sev]...)
		b = append(b, '"')
	}
	if k.ident >= 0 {
		sep()
		b = append(b, `"source":"`...)
		b, _ = jsonstr.AppendEscaped(b, val(k.ident))
		b = append(b, '"')
	} else if k.comm >= 0 {
		sep()
		b = append(b, `"source":"`...)
		b, _ = jsonstr.AppendEscaped(b, val(k.comm))
		b = append(b, '"')
	}
	ts := -1
	if i := k.sourceRealtime; i >= 0 && validMicros(val(i)) {
		ts = i
	} else if i := k.realtime; i >= 0 && validMicros(val(i)) {
		ts = i
	}
	if ts >= 0 {
		us, _ := strconv.ParseInt(string(val(ts)), 10, 64)
		sep()
		b = append(b, `"timestamp":"`...)
		b = time.UnixMicro(us).UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	// The syslog object: what a syslog record of the same message holds.
	mark := len(b)
	sep()
	b = append(b, `"syslog":{`...)
	inner := len(b)
	if i := k.facility; i >= 0 {
		if n, ok := canonicalUint(val(i), 23); ok {
			keep[i] = false
			b = append(b, `"facility":`...)
			b = strconv.AppendUint(b, n, 10)
		}
	}
	if sev >= 0 {
		if len(b) > inner {
			b = append(b, ',')
		}
		b = append(b, `"severity":`...)
		b = strconv.AppendInt(b, int64(sev), 10)
	}
	for _, kv := range [...]struct {
		key string
		i   int
	}{{`"hostname":`, k.hostname}, {`"appname":`, k.ident}, {`"procid":`, k.syslogPID}} {
		if kv.i < 0 {
			continue
		}
		if len(b) > inner {
			b = append(b, ',')
		}
		b = append(b, kv.key...)
		b = append(b, '"')
		var found jsonstr.Found
		b, found = jsonstr.AppendEscaped(b, val(kv.i))
		b = append(b, '"')
		if found == 0 {
			keep[kv.i] = false
		}
	}
	if len(b) == inner { // nothing of syslog's
		b = b[:mark]
	} else {
		b = append(b, '}')
	}
	// The sender, as journald recorded it from the kernel.
	if k.pid >= 0 && k.uid >= 0 && k.gid >= 0 {
		pid, ok1 := canonicalUint(val(k.pid), 1<<31-1)
		uid, ok2 := canonicalUint(val(k.uid), 1<<32-1)
		gid, ok3 := canonicalUint(val(k.gid), 1<<32-1)
		if ok1 && ok2 && ok3 && pid > 0 {
			out.peer = record.Peer{HasCreds: true, PID: int32(pid), UID: uint32(uid), GID: uint32(gid), Via: "journal"}
			keep[k.pid], keep[k.uid], keep[k.gid] = false, false, false
		}
	}
	// Everything else, by its journal name.
	mark = len(b)
	sep()
	b = append(b, `"journal":{`...)
	inner = len(b)
	for i := range e.Fields {
		if !keep[i] {
			continue
		}
		name := e.Fields[i].Name
		var more bool
		if dups&(1<<nameBit(name)) != 0 {
			if r.earlier(e, keep, i) {
				continue // written with the first one
			}
			more = r.later(e, keep, i) >= 0
		}
		if len(b) > inner {
			b = append(b, ',')
		}
		b = append(b, '"')
		b, _ = jsonstr.AppendEscaped(b, name)
		b = append(b, `":`...)
		if !more {
			b = appendValue(b, val(i))
			continue
		}
		b = append(b, '[')
		b = appendValue(b, val(i))
		for j := r.later(e, keep, i); j >= 0; j = r.later(e, keep, j) {
			b = append(b, ',')
			b = appendValue(b, val(j))
		}
		b = append(b, ']')
	}
	if len(b) == inner {
		b = b[:mark]
	} else {
		b = append(b, '}')
	}
	b = append(b, '}')
	r.buf = b
	return b, out
}

// earlier reports whether a field before i that goes into "journal" has
// i's name.
func (r *renderer) earlier(e *Entry, keep []bool, i int) bool {
	for j := 0; j < i; j++ {
		if keep[j] && bytes.Equal(e.Fields[j].Name, e.Fields[i].Name) {
			return true
		}
	}
	return false
}

// later is the next field after i that goes into "journal" with i's name,
// or -1.
func (r *renderer) later(e *Entry, keep []bool, i int) int {
	for j := i + 1; j < len(e.Fields); j++ {
		if keep[j] && bytes.Equal(e.Fields[j].Name, e.Fields[i].Name) {
			return j
		}
	}
	return -1
}

// nameBit hashes a field name to one of 64 bits, to find names that may
// repeat in an entry without comparing every pair.
func nameBit(name []byte) uint {
	if len(name) == 0 {
		return 0
	}
	return (uint(len(name))*131 + uint(name[len(name)-1])*31 + uint(name[len(name)/2])) & 63
}

// appendValue appends v as a JSON string when it is text (valid UTF-8
// without control bytes but TAB, LF and CR), else as {"base64":"…"}.
func appendValue(b, v []byte) []byte {
	start := len(b)
	b = append(b, '"')
	b, found := jsonstr.AppendEscaped(b, v)
	if found == 0 {
		return append(b, '"')
	}
	b = append(b[:start], `{"base64":"`...)
	b = base64.StdEncoding.AppendEncode(b, v)
	return append(b, `"}`...)
}

// foundFlags are the record flags of what jsonstr.AppendEscaped found.
func foundFlags(found jsonstr.Found) record.Flags {
	var f record.Flags
	if found&jsonstr.InvalidUTF8 != 0 {
		f |= record.FlagInvalidUTF8
	}
	if found&jsonstr.NUL != 0 {
		f |= record.FlagNUL
	}
	if found&jsonstr.Control != 0 {
		f |= record.FlagControl
	}
	return f
}

// canonicalUint parses v as a decimal number of at most limit written
// without leading zeros (so that writing the number back gives v).
func canonicalUint(v []byte, limit uint64) (uint64, bool) {
	if len(v) == 0 || len(v) > 20 || (v[0] == '0' && len(v) > 1) {
		return 0, false
	}
	var n uint64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (limit-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// validMicros reports whether v is a plausible timestamp in microseconds
// since the epoch (1970 to 9999).
func validMicros(v []byte) bool {
	n, ok := canonicalUint(v, 253402300799999999)
	return ok && n > 0
}
