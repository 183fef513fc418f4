package record

import (
	"bytes"
	"slices"
	"strconv"
	"time"

	syslog "github.com/leodido/go-syslog/v4"
	"github.com/leodido/go-syslog/v4/rfc3164"
	"github.com/leodido/go-syslog/v4/rfc5424"
)

// severityNames are the syslog(3) keywords of the eight severities, used
// as "level".
var severityNames = [8]string{"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"}

// seqSDID is the structured-data element a producer uses to carry its
// sequence stamp in RFC 5424 (params id, n, t; see package seqstamp).
const seqSDID = "seq@32473"

// utf8BOM may start an RFC 5424 MSG to say it is UTF-8; it is not content.
const utf8BOM = "\xef\xbb\xbf"

// yearSlack is how far in the future an RFC 3164 timestamp (which has no
// year) may lie before it is taken to belong to the previous year, as a
// "Dec 31" record received on Jan 1 does.
const yearSlack = 31 * 24 * time.Hour

// isRFC5424 reports whether payload starts with "<PRI>1 ".
func isRFC5424(p []byte) bool {
	i := 1
	for i < len(p) && i <= 3 && p[i] >= '0' && p[i] <= '9' {
		i++
	}
	return i > 1 && len(p) >= i+3 && p[i] == '>' && p[i+1] == '1' && p[i+2] == ' '
}

// appendSyslog decodes a payload that starts with '<'.
func (e *Encoder) appendSyslog(dst, payload []byte, m *Meta, in Flags) ([]byte, Result) {
	if isRFC5424(payload) {
		if e.rfc5424 == nil {
			e.rfc5424 = rfc5424.NewMachine()
		}
		msg, err := e.rfc5424.Parse(payload)
		sm, _ := msg.(*rfc5424.SyslogMessage)
		if err == nil && sm != nil && sm.Valid() && keepsAll(payload, sm.Message, true) {
			return e.appendSyslogRecord(dst, &sm.Base, sm.StructuredData, m, Result{Format: FormatRFC5424, Flags: in})
		}
		return e.appendRaw(dst, payload, m, Result{Format: FormatRaw, Flags: in | FlagSyslogParse})
	}

	now := recvTime(m)
	if out, res, ok := e.reuse3164(dst, payload, m, in); ok {
		return out, res
	}
	if y := now.Year(); e.rfc3164 == nil || y != e.year {
		// The machine fixes the year when it is built, so a long-running
		// encoder rebuilds it at New Year.
		e.rfc3164 = rfc3164.NewMachine(
			rfc3164.WithBestEffort(),
			rfc3164.WithYear(rfc3164.Year{YYYY: y}),
			rfc3164.WithLocaleTimezone(time.Local),
			rfc3164.WithRFC3339(),
			rfc3164.WithSecondFractions(),
			rfc3164.WithLenientDay(),
			rfc3164.WithEmbeddedNewlines(),
		)
		e.year = y
	}
	msg, err := e.rfc3164.Parse(payload)
	sm, _ := msg.(*rfc3164.SyslogMessage)
	// Best effort returns what it understood together with an error; a
	// record is only decoded when nothing of it would be lost, otherwise it
	// is kept whole as a raw message.
	if err != nil || sm == nil || !sm.Valid() || !keepsAll(payload, sm.Message, false) {
		return e.appendRaw(dst, payload, m, Result{Format: FormatRaw, Flags: in | FlagSyslogParse})
	}
	b := sm.Base
	if b.Timestamp != nil && isStamp(payload) && b.Timestamp.After(now.Add(yearSlack)) {
		t := b.Timestamp.AddDate(-1, 0, 0)
		b.Timestamp = &t
	}
	start := len(dst)
	dst, res := e.appendSyslogRecord(dst, &b, nil, m, Result{Format: FormatRFC3164, Flags: in})
	e.memo.remember(payload, b.Message, b.Appname, dst[start:], res.Flags&^in, m)
	return dst, res
}

// header3164 memoizes go-syslog's decoding of one RFC 3164 header. A
// sender's records share their header byte for byte within a second
// ("<14>Nov 22 21:16:48 host app[42]: "), and parsing it (a time.Parse and 7
// allocations) is most of the cost of a syslog record. When a payload starts
// with exactly the header bytes the parser last decoded, the decoded fields
// are the same, so the rendered members are reused and only the message is
// new. Every distinct header is still decoded by go-syslog; the memo is only
// used where the parser's result cannot differ: a printable-ASCII message
// after a header ending in ": " that named an app.
type header3164 struct {
	hdr    []byte // payload bytes before the message
	tail   []byte // rendered members after "message", up to and including "},"
	flags  Flags  // flags the header's members raised
	recvNS int64  // when it was decoded; a memo older than memoTTL is not used
	ok     bool
}

// memoTTL bounds how long a header is reused, so the year and clock logic
// of a fresh decode (a "Dec 31" header received in January) is re-applied.
const memoTTL = int64(10 * time.Second)

func (h *header3164) remember(payload []byte, msg, app *string, rendered []byte, flags Flags, m *Meta) {
	h.ok = false
	if msg == nil || app == nil || *app == "" || !printableASCII([]byte(*msg)) || len(*msg) == 0 {
		return
	}
	hdrLen := len(payload) - len(*msg)
	if hdrLen < 2 || payload[hdrLen-2] != ':' || payload[hdrLen-1] != ' ' {
		return
	}
	// rendered is {"message":"<msg>",...}: the message needs no escaping
	// (printable ASCII without '"' or '\\' is checked below), so the tail
	// starts right after it.
	prefix := len(`{"message":"`) + len(*msg) + 1
	if prefix > len(rendered) || string(rendered[len(`{"message":"`):prefix-1]) != *msg {
		return
	}
	end := bytes.LastIndex(rendered, []byte(`"agg":{`)) // the tail keeps its "},"
	if end < prefix {
		return
	}
	h.hdr = append(h.hdr[:0], payload[:hdrLen]...)
	h.tail = append(h.tail[:0], rendered[prefix:end]...)
	h.flags, h.recvNS, h.ok = flags, m.RecvNS, true
}

func (e *Encoder) reuse3164(dst, payload []byte, m *Meta, in Flags) ([]byte, Result, bool) {
	h := &e.memo
	if !h.ok || m.RecvNS-h.recvNS > memoTTL || m.RecvNS < h.recvNS ||
		len(payload) <= len(h.hdr) || !bytes.HasPrefix(payload, h.hdr) {
		return dst, Result{}, false
	}
	msg := payload[len(h.hdr):]
	if !printableASCII(msg) {
		return dst, Result{}, false
	}
	res := Result{Format: FormatRFC3164, Flags: in | h.flags}
	dst = append(dst, `{"message":"`...)
	dst = append(dst, msg...)
	dst = append(dst, '"')
	dst = append(dst, h.tail...)
	return e.appendAgg(dst, m, res), res, true
}

// printableASCII reports whether p is non-empty printable ASCII with nothing
// JSON must escape, so it can be copied into a JSON string as is.
func printableASCII(p []byte) bool {
	if len(p) == 0 {
		return false
	}
	for _, c := range p {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// isStamp reports whether the timestamp after "<PRI>" is an RFC 3164 Stamp
// ("Jan _2 15:04:05", no year) rather than RFC 3339.
func isStamp(p []byte) bool {
	i := bytes.IndexByte(p, '>')
	return i >= 0 && i+1 < len(p) && p[i+1] >= 'A' && p[i+1] <= 'Z'
}

// keepsAll guards against the parsers dropping bytes without an error (the
// RFC 3164 grammar, for instance, stops at a NUL and returns no message). The
// decoded message must be the tail of the payload; a record without a message
// must end where a header field ends.
func keepsAll(payload []byte, msg *string, rfc5424 bool) bool {
	if msg != nil {
		return bytes.HasSuffix(payload, []byte(*msg))
	}
	p := bytes.TrimRight(payload, " ")
	if len(p) == 0 {
		return false
	}
	last := p[len(p)-1]
	if rfc5424 {
		return last == '-' || last == ']' // NILVALUE or the end of the structured data
	}
	return last == ':' // "tag:" or "tag[pid]:" with an empty message
}

// appendSyslogRecord renders a parsed syslog record.
func (e *Encoder) appendSyslogRecord(dst []byte, b *syslog.Base, sd *map[string]map[string]string, m *Meta, res Result) ([]byte, Result) {
	var f Flags
	dst = append(dst, `{"message":`...)
	msg := ""
	if b.Message != nil {
		msg = *b.Message
		if res.Format == FormatRFC5424 && len(msg) >= len(utf8BOM) && msg[:len(utf8BOM)] == utf8BOM {
			msg = msg[len(utf8BOM):]
		}
	}
	dst, f = appendJSONStringBytes(dst, []byte(msg))
	res.Flags |= f

	var facility, severity uint8
	if b.Facility != nil {
		facility = *b.Facility
	}
	if b.Severity != nil {
		severity = *b.Severity & 7
	}
	dst = append(dst, `,"level":"`...)
	dst = append(dst, severityNames[severity]...)
	dst = append(dst, '"')

	source := b.Appname
	if source == nil || *source == "" {
		source = b.Hostname
	}
	if source != nil && *source != "" {
		dst = append(dst, `,"source":`...)
		dst, f = appendJSONStringBytes(dst, []byte(*source))
		res.Flags |= f
	}
	if b.Timestamp != nil {
		dst = append(dst, `,"timestamp":"`...)
		dst = b.Timestamp.AppendFormat(dst, time.RFC3339Nano)
		dst = append(dst, '"')
	}
	if sd != nil {
		dst = appendSeqStamp(dst, (*sd)[seqSDID])
	}

	dst = append(dst, `,"syslog":{"facility":`...)
	dst = strconv.AppendUint(dst, uint64(facility), 10)
	dst = append(dst, `,"severity":`...)
	dst = strconv.AppendUint(dst, uint64(severity), 10)
	for _, kv := range [...]struct {
		key string
		val *string
	}{{"hostname", b.Hostname}, {"appname", b.Appname}, {"procid", b.ProcID}, {"msgid", b.MsgID}} {
		if kv.val == nil || *kv.val == "" {
			continue
		}
		dst = append(dst, `,"`...)
		dst = append(dst, kv.key...)
		dst = append(dst, `":`...)
		dst, f = appendJSONStringBytes(dst, []byte(*kv.val))
		res.Flags |= f
	}
	if sd != nil && len(*sd) > 0 {
		dst, f = e.appendSD(dst, *sd)
		res.Flags |= f
	}
	dst = append(dst, "},"...)
	return e.appendAgg(dst, m, res), res
}

// appendSeqStamp emits the seqstamp JSON members from the params of a
// seq@32473 element. The stamp is only emitted when id is present and n is a
// number, since analysers need both; sent_ns is added when t is a number.
func appendSeqStamp(dst []byte, params map[string]string) []byte {
	id, ok := params["id"]
	if !ok || id == "" {
		return dst
	}
	seq, err := strconv.ParseUint(params["n"], 10, 64)
	if err != nil {
		return dst
	}
	dst = append(dst, `,"producer_id":`...)
	dst, _ = appendJSONStringBytes(dst, []byte(id))
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	if sent, err := strconv.ParseInt(params["t"], 10, 64); err == nil {
		dst = append(dst, `,"sent_ns":`...)
		dst = strconv.AppendInt(dst, sent, 10)
	}
	return dst
}

// appendSD renders structured data as "sd":{id:{param:value}}, elements and
// params in sorted order so equal input gives equal output.
func (e *Encoder) appendSD(dst []byte, sd map[string]map[string]string) ([]byte, Flags) {
	var flags, f Flags
	e.ids = sortedKeys(e.ids[:0], sd)
	dst = append(dst, `,"sd":{`...)
	for i, id := range e.ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst, f = appendJSONStringBytes(dst, []byte(id))
		flags |= f
		dst = append(dst, ":{"...)
		params := sd[id]
		e.names = sortedKeys(e.names[:0], params)
		for j, name := range e.names {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst, f = appendJSONStringBytes(dst, []byte(name))
			flags |= f
			dst = append(dst, ':')
			dst, f = appendJSONStringBytes(dst, []byte(params[name]))
			flags |= f
		}
		dst = append(dst, '}')
	}
	return append(dst, '}'), flags
}

func sortedKeys[V any](dst []string, m map[string]V) []string {
	for k := range m {
		dst = append(dst, k)
	}
	slices.Sort(dst)
	return dst
}
