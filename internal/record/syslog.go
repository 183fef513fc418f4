package record

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/ipclab/logagg/internal/jsonstr"
	syslog "github.com/leodido/go-syslog/v4"
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
		if err == nil && sm != nil && sm.Valid() && keepsAll(payload, sm.Message) {
			return e.appendSyslogRecord(dst, &sm.Base, sm.StructuredData, m, Result{Format: FormatRFC5424, Flags: in})
		}
		return e.appendRaw(dst, payload, m, Result{Format: FormatRaw, Flags: in | FlagSyslogParse})
	}
	if out, res, ok := e.reuse3164(dst, payload, m, in); ok {
		return out, res
	}
	var h rfc3164Header
	if !h.parse(payload, m.ParseHostname) {
		// No valid PRI. rsyslog would still decode "<>" and zero-padded
		// PRIs, and take anything else whole as the MSG of a record with an
		// invalid PRI; we deliberately keep such payloads raw (see
		// rfc3164.go and rsyslogDifferences).
		return e.appendRaw(dst, payload, m, Result{Format: FormatRaw, Flags: in | FlagSyslogParse})
	}
	return e.append3164(dst, payload, &h, m, in)
}

// append3164 renders a parsed RFC 3164 record and remembers its header for
// the records that follow (see memo3164).
func (e *Encoder) append3164(dst, payload []byte, h *rfc3164Header, m *Meta, in Flags) ([]byte, Result) {
	msgStart := h.msg
	if msgStart < len(payload) && payload[msgStart] == ' ' {
		// rsyslog keeps the SP after "tag:" as the first byte of MSG; it
		// separates, it is not content.
		msgStart++
	}
	e.fields = Fields{PRI: int16(h.pri), App: h.app.of(payload), Host: h.host.of(payload),
		ProcID: h.procid.of(payload), Tag: h.tag.of(payload), Message: payload[msgStart:]}
	dst = append(dst, `{"message":`...)
	dst, msgFlags := appendJSONStringBytes(dst, payload[msgStart:])
	tailStart := len(dst)

	// The members after the message depend on the header alone; so do
	// the flags they raise (hdrFlags), which the memo keeps with them.
	var hdrFlags, f Flags
	if h.noHeader {
		hdrFlags = FlagSyslogParse
	}
	dst = append(dst, `,"level":"`...)
	dst = append(dst, severityNames[h.pri&7]...)
	dst = append(dst, '"')
	source := h.app
	if source.empty() {
		source = h.host
	}
	if !source.empty() {
		dst = append(dst, `,"source":`...)
		dst, f = appendJSONStringBytes(dst, payload[source.off:source.end])
		hdrFlags |= f
	}
	if h.stamp.present {
		dst = append(dst, `,"timestamp":"`...)
		dst = e.stampTime(&h.stamp, m).AppendFormat(dst, time.RFC3339Nano)
		dst = append(dst, '"')
	}
	dst = append(dst, `,"syslog":{"facility":`...)
	dst = strconv.AppendUint(dst, uint64(h.pri>>3), 10)
	dst = append(dst, `,"severity":`...)
	dst = strconv.AppendUint(dst, uint64(h.pri&7), 10)
	for _, kv := range [...]struct {
		key string
		val span
	}{{"hostname", h.host}, {"appname", h.app}, {"procid", h.procid}} {
		v := payload[kv.val.off:kv.val.end]
		// rsyslog reports a missing procid as "-"; a "[-]" says no more.
		if len(v) == 0 || (kv.key == "procid" && len(v) == 1 && v[0] == '-') {
			continue
		}
		dst = append(dst, `,"`...)
		dst = append(dst, kv.key...)
		dst = append(dst, `":`...)
		dst, f = appendJSONStringBytes(dst, v)
		hdrFlags |= f
	}
	if h.tagMore {
		dst = append(dst, `,"tag":`...)
		dst, f = appendJSONStringBytes(dst, payload[h.tag.off:h.tag.end])
		hdrFlags |= f
	}
	dst = append(dst, "},"...)
	e.memo.remember(payload, h, msgStart, dst[tailStart:], hdrFlags, m)
	res := Result{Format: FormatRFC3164, Flags: in | msgFlags | hdrFlags}
	return e.appendAgg(dst, m, res), res
}

// stampTime turns a parsed timestamp into an instant as rsyslog does. An
// RFC 3339 timestamp carries everything. An RFC 3164 one takes the year
// (unless it names one) and the UTC offset from the receive time in the
// local zone; a timestamp more than yearSlack in the future belongs to the
// previous year. Fields rsyslog accepts beyond their range (second 60, day
// 31 of a short month) roll over into the next minute or month.
func (e *Encoder) stampTime(s *stamp, m *Meta) time.Time {
	nsec := s.frac
	for d := s.fracDigits; d < 9; d++ {
		nsec *= 10
	}
	for d := s.fracDigits; d > 9 && nsec > 0; d-- {
		nsec /= 10
	}
	if s.zoned {
		return time.Date(s.year, time.Month(s.month), s.day, s.hour, s.minute, s.sec, nsec, e.zones.get(s.offset))
	}
	recv := recvTime(m)
	_, offset := recv.Zone()
	year := s.year
	if !s.hasYear {
		year = recv.Year()
	}
	t := time.Date(year, time.Month(s.month), s.day, s.hour, s.minute, s.sec, nsec, e.zones.get(offset))
	if !s.hasYear && t.After(recv.Add(yearSlack)) {
		t = t.AddDate(-1, 0, 0)
	}
	return t
}

// zoneCache holds the fixed-offset Locations timestamps were rendered in,
// so that rendering does not allocate one per record. Senders use few
// offsets; the oldest entry makes room for a new one.
type zoneCache struct {
	offsets [4]int
	locs    [4]*time.Location
	next    int
}

func (z *zoneCache) get(offset int) *time.Location {
	if offset == 0 {
		return time.UTC
	}
	for i, l := range z.locs {
		if l != nil && z.offsets[i] == offset {
			return l
		}
	}
	l := time.FixedZone("", offset)
	z.offsets[z.next], z.locs[z.next] = offset, l
	z.next = (z.next + 1) % len(z.locs)
	return l
}

// memo3164 remembers the last RFC 3164 header the parser decoded and how it
// rendered. A sender's records share their header byte for byte within a
// second ("<14>Nov 22 21:16:48 host app[42]: "): when a payload starts with
// exactly those bytes, the decoded fields are the same, so the rendered
// members are reused and only the message is new. The parser is cheap;
// rendering the timestamp is what the memo saves.
//
// A header is remembered only when the message starts with the SP the
// output drops and the parse looked at nothing past that SP
// (rfc3164Header.far): then those bytes alone decided every field, and a
// payload starting with them decodes the same way whatever message follows.
// ("<13>Nov 8 x" is a TAG "Nov" and a message "8 x", but the timestamp
// attempt that failed read up to the 'x'; "<13>Nov 8 04:33:41 x", with the
// same "<13>Nov ", has a timestamp. So the first is not remembered.)
type memo3164 struct {
	hdr       []byte // payload bytes before the message
	tail      []byte // rendered members after "message", up to and including "},"
	flags     Flags  // flags the header's members raised
	recvNS    int64  // when it was decoded; a memo older than memoTTL is not used
	parseHost bool   // the Meta.ParseHostname it was decoded with
	ok        bool
	// The header's fields, at the same offsets in every payload that
	// starts with hdr.
	pri                    int16
	app, host, procid, tag span
}

// memoTTL bounds how long a header is reused, so the year and clock logic
// of a fresh decode (a "Dec 31" header received in January) is re-applied.
const memoTTL = int64(10 * time.Second)

// remember keeps the header of payload, whose message starts at msgStart,
// when the next payload may reuse it; tail is what the header rendered
// after the message and flags what that raised.
func (h *memo3164) remember(payload []byte, hdr *rfc3164Header, msgStart int, tail []byte, flags Flags, m *Meta) {
	h.ok = false
	if msgStart != hdr.msg+1 || hdr.far > hdr.msg {
		return
	}
	h.hdr = append(h.hdr[:0], payload[:msgStart]...)
	h.tail = append(h.tail[:0], tail...)
	h.pri, h.app, h.host, h.procid, h.tag = int16(hdr.pri), hdr.app, hdr.host, hdr.procid, hdr.tag
	h.flags, h.recvNS, h.parseHost, h.ok = flags, m.RecvNS, m.ParseHostname, true
}

func (e *Encoder) reuse3164(dst, payload []byte, m *Meta, in Flags) ([]byte, Result, bool) {
	h := &e.memo
	if !h.ok || m.RecvNS-h.recvNS > memoTTL || m.RecvNS < h.recvNS || m.ParseHostname != h.parseHost ||
		len(payload) <= len(h.hdr) || !bytes.HasPrefix(payload, h.hdr) {
		return dst, Result{}, false
	}
	msg := payload[len(h.hdr):]
	if !plainJSON(msg) {
		return dst, Result{}, false
	}
	e.fields = Fields{PRI: h.pri, App: h.app.of(payload), Host: h.host.of(payload), ProcID: h.procid.of(payload),
		Tag: h.tag.of(payload), Message: msg}
	res := Result{Format: FormatRFC3164, Flags: in | h.flags}
	dst = append(dst, `{"message":"`...)
	dst = append(dst, msg...)
	dst = append(dst, '"')
	dst = append(dst, h.tail...)
	return e.appendAgg(dst, m, res), res, true
}

// plainJSON reports whether p is non-empty and can be copied into a JSON
// string as is: ASCII without control bytes, '"' or '\\', which
// jsonstr.AppendEscaped copies unchanged and without raising a flag. It
// looks at eight bytes at a time: on a header memo hit it is most of the
// work left.
func plainJSON(p []byte) bool {
	if len(p) == 0 {
		return false
	}
	i := 0
	for ; i+8 <= len(p); i += 8 {
		if jsonstr.SpecialBytes(binary.LittleEndian.Uint64(p[i:])) != 0 {
			return false
		}
	}
	for _, c := range p[i:] {
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// keepsAll guards against the RFC 5424 parser dropping bytes without an
// error. The decoded message must be the tail of the payload; a record
// without a message must end where a header field ends.
func keepsAll(payload []byte, msg *string) bool {
	if msg != nil {
		return bytes.HasSuffix(payload, []byte(*msg))
	}
	p := bytes.TrimRight(payload, " ")
	if len(p) == 0 {
		return false
	}
	last := p[len(p)-1]
	return last == '-' || last == ']' // NILVALUE or the end of the structured data
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
	e.fields = Fields{PRI: int16(facility)<<3 | int16(severity), App: stringBytes(b.Appname), Host: stringBytes(b.Hostname),
		ProcID: stringBytes(b.ProcID), MsgID: stringBytes(b.MsgID), Message: unsafe.Slice(unsafe.StringData(msg), len(msg))}
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

// stringBytes views a parsed header field as bytes, without a copy (the
// parser's strings live until the next record).
func stringBytes(s *string) []byte {
	if s == nil {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(*s), len(*s))
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
