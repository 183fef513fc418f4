package record

import (
	"strconv"
	"time"

	"github.com/ipclab/logagg/internal/jsonstr"
	syslog "github.com/leodido/go-syslog/v4"
)

// Encoder turns record payloads into JSON lines. The zero value is not
// usable; call NewEncoder. An Encoder is not safe for concurrent use: it
// owns reusable syslog parser machines and scratch space, so each listener
// goroutine keeps its own.
//
// Decoding is decided per record from its first bytes:
//
//   - first non-blank byte '{': the JSON fast path. The object is validated
//     by an allocation-free scanner (nesting limited to 128 levels, strings
//     must be valid UTF-8 without raw control characters) and copied
//     verbatim, its closing '}' replaced by `,"agg":{…}}`. Newlines between
//     tokens become spaces so the record stays one line. Anything that does
//     not validate, including trailing garbage, becomes a raw message flagged
//     malformed_json. A top-level "agg" member (also when the key is spelled
//     with escapes) is renamed "producer_agg" and flagged reserved_key; a
//     top-level member name that repeats (compared unescaped, "agg" counted
//     as "producer_agg") is flagged duplicate_key. Nested objects are not
//     checked for either (keys.go says why and how).
//   - first non-blank byte '[' or '"': if the whole payload is one valid JSON
//     array or string (blanks around it allowed), it is kept as a raw
//     message flagged json_not_object; otherwise ("[INFO] starting") it is
//     plain text without a flag. Numbers and literals (42, true) are plain
//     text: they cannot be told from it.
//   - first byte '<': syslog. "<PRI>1 " selects RFC 5424 (go-syslog; a
//     record it rejects, or from which it would drop bytes, becomes a raw
//     message flagged syslog_parse). Anything else is RFC 3164, read as
//     rsyslog reads it (rfc3164.go): a payload whose PRI is not '<', 1-3
//     digits and '>' up to 191 stays a raw message flagged syslog_parse,
//     every other one decodes, whatever follows the PRI (no timestamp, RFC
//     3339 with fractions and zones, control bytes, an empty body), and
//     srslog's default form, a space then an RFC 3339 timestamp, is read
//     as syslog-ng reads it. A HOSTNAME is looked for only when
//     Meta.ParseHostname says so, or after srslog's form; a space after
//     the PRI without a timestamp raises syslog_parse. An RFC
//     5424 structured-data element "seq@32473" with params id, n and t is
//     also emitted as the top-level producer_id, seq and sent_ns of package
//     seqstamp.
//   - anything else: a raw message.
//
// One trailing NUL is removed first (Python's SysLogHandler ends every
// message with one; rsyslog drops it too), then one trailing '\r'. Whatever
// the input, the output is one valid JSON object on one line; the JSON, raw
// and RFC 3164 paths allocate nothing once dst has grown to the needed size.
type Encoder struct {
	rfc5424 syslog.Machine // created on first use
	ids     []string       // scratch: sorted structured-data element ids
	names   []string       // scratch: sorted param names of one element
	zones   zoneCache      // fixed-offset zones of rendered timestamps

	// memo remembers the header of the last RFC 3164 record decoded, and
	// how it rendered (see memo3164).
	memo memo3164

	recvNS decimalMemo // agg.recv_ns, the same for a whole read or batch

	keys topKeys // the JSON scanner's top-level keys: key dictionary and scratch

	fields Fields // what the last Append read (Fields)
}

// Fields are what the encoder read from a syslog header and where the
// message is, for the routing rules: they match on them without decoding
// the record again.
type Fields struct {
	// PRI is facility*8 + severity, or -1 when the record had none (plain
	// text, JSON).
	PRI int16
	// App, Host, ProcID and MsgID are the syslog header's fields as
	// received (empty when absent). Message is the message as received:
	// a syslog record's MSG, a plain-text record whole; nil for a JSON
	// record, whose members rules find in its payload.
	App, Host, ProcID, MsgID, Message []byte
	// Tag is an RFC 3164 record's whole TAG as received, with its ':'
	// (rsyslog's syslogtag: "dockerd/3f2a1b9c[1234]:", "sshd[99]:"), also
	// where the output leaves syslog.tag out because it says no more than
	// appname and procid; empty for other formats and when absent.
	Tag []byte
	// Index is where a JSON record's top-level members are, found by the
	// encoder's own scan so that rules need not scan the object again
	// (Paths.FindMembers); nil for other records.
	Index *MemberIndex
}

// Fields are what the last Append read; valid until the next Append (the
// slices point into its payload).
func (e *Encoder) Fields() *Fields { return &e.fields }

// decimalMemo appends the decimal form of an int64, formatting it only when
// it differs from the last one. A listener stamps one receive time on every
// record of a read, so at shm rates this saves a strconv.AppendInt (about
// 15 % of a short record's encoding) on all but the first record of each.
type decimalMemo struct {
	v    int64
	n    uint8 // length of text; 0 until the first use
	text [20]byte
}

func (d *decimalMemo) append(dst []byte, v int64) []byte {
	if d.n == 0 || v != d.v {
		d.v = v
		d.n = uint8(len(strconv.AppendInt(d.text[:0], v, 10)))
	}
	return append(dst, d.text[:d.n]...)
}

// NewEncoder returns an Encoder.
func NewEncoder() *Encoder { return &Encoder{} }

// zeroMeta stands in for a nil *Meta so that Append never panics.
var zeroMeta Meta

// Append decodes payload (one record, framing removed, no trailing newline),
// appends its JSON line including the trailing '\n' to dst, and returns the
// extended slice. in carries flags the framer already knows (FlagTruncated,
// FlagPartial, FlagFraming); they are included in the result and the output.
// Append never fails: input it cannot decode is kept as a raw message and
// flagged.
func (e *Encoder) Append(dst, payload []byte, m *Meta, in Flags) ([]byte, Result) {
	if m == nil {
		m = &zeroMeta
	}
	e.fields = Fields{PRI: -1}
	// Python's SysLogHandler ends every message with a NUL, and rsyslog
	// drops one trailing NUL before parsing; then one CR, which
	// CRLF-terminated lines leave after the framer removed the LF.
	if n := len(payload); n > 0 && payload[n-1] == 0 {
		payload = payload[:n-1]
	}
	if n := len(payload); n > 0 && payload[n-1] == '\r' {
		payload = payload[:n-1]
	}
	i := 0
	for i < len(payload) && isJSONSpace(payload[i]) {
		i++
	}
	if i < len(payload) {
		switch payload[i] {
		case '{':
			return e.appendJSON(dst, payload, i, m, in)
		case '[', '"':
			return e.appendNotObject(dst, payload, i, m, in)
		}
	}
	if len(payload) > 0 && payload[0] == '<' && !m.NoSyslog {
		return e.appendSyslog(dst, payload, m, in)
	}
	return e.appendRaw(dst, payload, m, Result{Format: FormatRaw, Flags: in})
}

// appendJSON is the fast path for a payload whose first non-blank byte,
// at start, is '{'.
func (e *Encoder) appendJSON(dst, payload []byte, start int, m *Meta, in Flags) ([]byte, Result) {
	if m.Rendered && start == 0 && payload[len(payload)-1] == '}' {
		return e.appendRendered(dst, payload, m, in)
	}
	obj := payload[start:]
	info, ok := scanObject(obj, &e.keys)
	if !ok || !onlySpace(obj[info.end:]) {
		return e.appendRaw(dst, payload, m, Result{Format: FormatRaw, Flags: in | FlagMalformedJSON})
	}
	body := obj[:info.end-1] // without the closing '}'
	switch {
	case info.flags&FlagReservedKey != 0:
		dst = appendRenamed(dst, body, e.keys.aggs, info.newline)
	case info.newline:
		dst = appendNoNewlines(dst, body)
	default:
		dst = append(dst, body...)
	}
	if info.members > 0 {
		dst = append(dst, ',')
	}
	e.keys.index.Object = obj[:info.end]
	e.fields.Index = &e.keys.index
	res := Result{Format: FormatJSON, Flags: in | info.flags}
	return e.appendAgg(dst, m, res), res
}

// appendRendered is appendJSON for a payload the listener rendered
// (Meta.Rendered): what appendJSON would read of it is known, so it is
// copied as it is. Fields.Index stays nil.
func (e *Encoder) appendRendered(dst, payload []byte, m *Meta, in Flags) ([]byte, Result) {
	dst = append(dst, payload[:len(payload)-1]...) // without the closing '}'
	// "{}" has no member for agg to follow.
	if len(payload) > 2 {
		dst = append(dst, ',')
	}
	res := Result{Format: FormatJSON, Flags: in}
	return e.appendAgg(dst, m, res), res
}

// appendRenamed appends the object body b as appendJSON does, with the
// top-level keys whose opening quotes are at aggs (in order) replaced by
// "producer_agg", however they were spelled. The values are untouched.
func appendRenamed(dst, b []byte, aggs []int, newline bool) []byte {
	prev := 0
	for _, q := range aggs {
		end, _, _ := scanString(b, q+1)
		if newline {
			dst = appendNoNewlines(dst, b[prev:q])
		} else {
			dst = append(dst, b[prev:q]...)
		}
		dst = append(dst, '"')
		dst = append(dst, producerAgg...)
		dst = append(dst, '"')
		prev = end
	}
	if newline {
		return appendNoNewlines(dst, b[prev:])
	}
	return append(dst, b[prev:]...)
}

func onlySpace(b []byte) bool {
	for _, c := range b {
		if !isJSONSpace(c) {
			return false
		}
	}
	return true
}

// appendNotObject handles a payload whose first non-blank byte, at start,
// is '[' or '"'. If the payload is one valid JSON array or string (with
// blanks around it) it is kept as a raw message flagged json_not_object:
// the output's top level must be an object, and wrapping the value in one
// would invent a member name. Anything else, such as "[INFO] starting", is
// plain text without a flag. Numbers and literals (42, true) are never
// looked at: as text they are indistinguishable from plain text.
func (e *Encoder) appendNotObject(dst, payload []byte, start int, m *Meta, in Flags) ([]byte, Result) {
	v := payload[start:]
	var end int
	var ok bool
	if v[0] == '[' {
		var info objInfo
		info, ok = scanNested(v, maxDepth, nil)
		end = info.end
	} else {
		end, _, ok = scanString(v, 1)
	}
	res := Result{Format: FormatRaw, Flags: in}
	if ok && onlySpace(v[end:]) {
		res.Flags |= FlagNotObject
	}
	return e.appendRaw(dst, payload, m, res)
}

// appendNoNewlines appends b with every '\n' and '\r' replaced by a space.
// It is only used on validated JSON, where those bytes can only be
// whitespace between tokens, so the meaning is unchanged.
func appendNoNewlines(dst, b []byte) []byte {
	start := 0
	for i, c := range b {
		if c == '\n' || c == '\r' {
			dst = append(dst, b[start:i]...)
			dst = append(dst, ' ')
			start = i + 1
		}
	}
	return append(dst, b[start:]...)
}

// appendRaw writes {"message":<payload>,"agg":…}.
func (e *Encoder) appendRaw(dst, payload []byte, m *Meta, res Result) ([]byte, Result) {
	e.fields.Message = payload
	dst = append(dst, `{"message":`...)
	var f Flags
	dst, f = appendJSONStringBytes(dst, payload)
	res.Flags |= f
	dst = append(dst, ',')
	return e.appendAgg(dst, m, res), res
}

// appendAgg closes a record with the "agg" member, the closing brace of the
// record and the newline. The caller has written the separator before it.
func (e *Encoder) appendAgg(dst []byte, m *Meta, res Result) []byte {
	dst = append(dst, `"agg":{"recv_ns":`...)
	dst = e.recvNS.append(dst, m.RecvNS)
	dst = append(dst, m.static...)
	if len(m.SourceTime) > 0 {
		dst = append(dst, `,"source_time":`...)
		dst, _ = appendJSONStringBytes(dst, m.SourceTime)
	}
	dst = append(dst, `,"format":"`...)
	dst = append(dst, res.Format.String()...)
	dst = append(dst, '"')
	if res.Flags != 0 {
		dst = append(dst, `,"flags":[`...)
		first := true
		for i := range flagNames {
			if res.Flags&(1<<i) == 0 {
				continue
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(dst, '"')
			dst = append(dst, flagNames[i]...)
			dst = append(dst, '"')
		}
		dst = append(dst, ']')
	}
	return append(dst, "}}\n"...)
}

// recvTime is the record's receive time, or now when the listener did not
// set one.
func recvTime(m *Meta) time.Time {
	if m.RecvNS > 0 {
		return time.Unix(0, m.RecvNS)
	}
	return time.Now()
}

// appendJSONString appends s as a JSON string literal.
func appendJSONString(dst []byte, s string) []byte {
	dst, _ = appendJSONStringBytes(dst, []byte(s))
	return dst
}

// appendJSONStringBytes appends s as a JSON string literal. Invalid UTF-8 is
// replaced by U+FFFD and reported as FlagInvalidUTF8; NUL is escaped and
// reported as FlagNUL, the other C0 controls as FlagControl (TAB, LF and CR
// are escaped but not reported: multi-line messages are text), so the
// output is always valid JSON whatever the input.
func appendJSONStringBytes(dst, s []byte) ([]byte, Flags) {
	dst = append(dst, '"')
	dst, found := jsonstr.AppendEscaped(dst, s)
	var flags Flags
	if found != 0 {
		if found&jsonstr.InvalidUTF8 != 0 {
			flags |= FlagInvalidUTF8
		}
		if found&jsonstr.NUL != 0 {
			flags |= FlagNUL
		}
		if found&jsonstr.Control != 0 {
			flags |= FlagControl
		}
	}
	return append(dst, '"'), flags
}
