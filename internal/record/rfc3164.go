package record

// An RFC 3164 ("BSD syslog") header reader that takes what real senders
// send, with rsyslog's legacy parser as the reference: the fields must equal
// what rsyslog 8.2302 (Debian 12) extracts from the same bytes, with its
// default settings (pmrfc3164 without options, the datetime parsers with the
// flags pmrfc3164 passes, programname and procid derived from the TAG as
// runtime/msg.c does). rsyslog_diff_test.go runs rsyslogd over a corpus of
// captured client output and holds the short list of deliberate
// differences.
//
// The algorithm, after "<PRI>":
//
//  1. Headerless: blanks (SP, TAB) followed by '{' or '[' mean the whole
//     rest is the message; no timestamp, hostname or tag.
//  2. Timestamp, first match wins: RFC 3339 (any number of digits per field,
//     a fraction, 'Z' or ±hh:mm required); RFC 3164 "Mmm dd hh:mm:ss"
//     (month case-insensitive, day space-padded or not, optional year before
//     the month or in place of the hour, optional ".frac", optional trailing
//     ':'); RFC 3164 after one extra space (HP ProCurve); RFC 3339 after
//     one extra space (srslog's default format, which rsyslog does not
//     read: see below). A timestamp must be followed by SP (consumed) or
//     the end. Without one, the receive time applies and the record has no
//     "timestamp".
//  3. Hostname, only when the listener says so (Meta.ParseHostname), or
//     after srslog's space and RFC 3339 timestamp: letters, digits, '.',
//     '_', '-', at most 511 bytes, ending in a letter or digit and followed
//     by SP, or running to the end of the payload.
//  4. TAG: everything up to ':' (included in the TAG) or SP (not included),
//     at most 510 bytes before the ':'. The message is what follows; its
//     first byte is usually the space after "tag:", which the output drops.
//  5. programname (our appname): the TAG up to the first ':', '[', '/' or
//     non-printable byte. procid: the TAG between the first '[' and the next
//     ']', absent without a ']'.
//
// Where rsyslog accepts a PRI we do not ("<>", more than three digits), the
// record stays raw and flagged syslog_parse: a payload that merely starts
// with '<' is more often not syslog at all (HTML, "<stdin>") than a sender
// that zero-pads its priority.
//
// One form rsyslog does not read and we do, as syslog-ng does: a space
// after the PRI, then an RFC 3339 timestamp, a hostname and the TAG. It is
// what srslog (github.com/RackSec/srslog, the syslog package of Docker and
// of many Go programs) sends with its defaults: "<166> 2026-11-26T20:59:03Z
// vm app[16296]: msg". rsyslog takes no timestamp there and an empty TAG,
// so the whole header would end up in the message. The hostname is looked
// for whatever the listener says, because srslog always writes one (its
// "unixgram" and "unix" networks send this form too) and no client of the
// local socket that writes none sends a space after the PRI. A payload
// with a space after the PRI and no timestamp we can read is decoded as
// rsyslog decodes it and flagged syslog_parse (noHeader): the space
// promised a header that is not there (see docs/adr/0051).

// span is payload[off:end]; off == end when the field is absent.
type span struct{ off, end int }

func (s span) empty() bool { return s.off == s.end }

// of is the span's bytes of p (nil when empty).
func (s span) of(p []byte) []byte {
	if s.empty() {
		return nil
	}
	return p[s.off:s.end:s.end]
}

// stamp is a timestamp's fields as written; they are turned into an instant
// only when the record is rendered, with the receive time supplying what an
// RFC 3164 timestamp leaves out.
type stamp struct {
	year, month, day  int
	hour, minute, sec int // sec may be 60 (a leap second, as rsyslog accepts)
	frac, fracDigits  int // fraction as written: frac / 10^fracDigits seconds
	hasYear           bool
	zoned             bool // RFC 3339: offset is the UTC offset in seconds
	offset            int
	present           bool
}

// rfc3164Header holds where the parts of an RFC 3164 payload are: offsets
// into the payload, nothing copied.
type rfc3164Header struct {
	pri    uint8 // 0..191
	stamp  stamp
	ts     span // the timestamp's bytes, with the SP that ends it
	host   span
	tag    span // rsyslog's TAG, with its ':'
	app    span // rsyslog's programname
	procid span
	msg    int // start of rsyslog's MSG; the output drops its first byte when it is SP

	// tagMore says the TAG holds more than the app name, "[procid]" and
	// ':' ("dockerd/3f2a1b9c[1234]:", "postfix/smtpd[123]:"), so the
	// output keeps it whole.
	tagMore bool
	// spaced says a space and an RFC 3339 timestamp followed the PRI
	// (srslog's default format); then a hostname is always looked for.
	spaced bool
	// noHeader says a space followed the PRI but no timestamp: the
	// record is flagged syslog_parse.
	noHeader bool

	// far is the furthest offset the parse looked at, also in attempts
	// that failed. When it is not past msg, the bytes before the message
	// decided everything, and a payload starting with the same bytes
	// decodes the same way (see memo3164).
	far int
}

// Limits of rsyslog's fixed buffers (CONF_HOSTNAME_MAXSIZE and
// CONF_TAG_MAXSIZE are 512, one byte is the terminator; the TAG keeps one
// more for its ':').
const (
	maxHostname = 511
	maxTagBody  = 510
)

// parsePRI reads "<" 1-3 digits ">" with a value of at most 191 and returns
// the priority and the offset after '>'.
func parsePRI(p []byte) (pri uint8, next int, ok bool) {
	if len(p) < 3 || p[0] != '<' {
		return 0, 0, false
	}
	v, i := 0, 1
	for i < len(p) && i <= 3 && isDigit(p[i]) {
		v = v*10 + int(p[i]-'0')
		i++
	}
	if i == 1 || i >= len(p) || p[i] != '>' || v > 191 {
		return 0, 0, false
	}
	return uint8(v), i + 1, true
}

// parse decodes payload (trailing NUL and CR already removed) into h. It
// reports false when the payload does not start with a valid PRI, the only
// thing that makes an RFC 3164 record unparseable: everything after it is
// taken the way rsyslog takes it.
func (h *rfc3164Header) parse(payload []byte, parseHostname bool) bool {
	pri, start, ok := parsePRI(payload)
	if !ok {
		return false
	}
	*h = rfc3164Header{pri: pri, msg: start}
	c := cursor{p: payload, i: start, n: len(payload) - start}

	// 1. Headerless: JSON or a bracketed list right after the PRI.
	j := c.i
	for c.at(j) == ' ' || c.at(j) == '\t' {
		j++
	}
	h.far = j
	if b := c.at(j); b == '{' || b == '[' {
		return true
	}

	// 2. Timestamp.
	c = h.timestamp(c)
	h.stamp.present = !h.ts.empty()
	h.noHeader = !h.stamp.present && c.at(start) == ' '

	// 3. Hostname.
	if (parseHostname || h.spaced) && c.n > 0 {
		i := 0
		for i < c.n && i < maxHostname && isHostnameByte(c.at(c.i+i)) {
			i++
		}
		h.far = max(h.far, c.i+i)
		switch {
		case i == c.n:
			// Nothing but the hostname: rsyslog takes it as one whatever
			// its last byte.
			h.host = span{c.i, c.i + i}
			c.i, c.n = c.i+i, 0
		case i > 0 && isAlnum(c.at(c.i+i-1)) && c.at(c.i+i) == ' ':
			h.host = span{c.i, c.i + i}
			c.i, c.n = c.i+i+1, c.n-i-1
		}
	}

	// 4. TAG.
	tagStart, i := c.i, 0
	for c.n > 0 && c.peek() != ':' && c.peek() != ' ' && i < maxTagBody {
		c.i++
		c.n--
		i++
	}
	h.far = max(h.far, c.i) // where the TAG stopped
	if c.n > 0 && c.peek() == ':' {
		c.i++
		c.n--
	}
	// After a year-prefixed timestamp rsyslog's count of the bytes left is
	// one too large (see timestamp3164), so its TAG loop takes the string
	// terminator as one more TAG byte when the payload ends inside the TAG.
	// That byte is not in the payload: the TAG and the message stop at its
	// end.
	end := min(c.i, len(payload))
	h.tag = span{tagStart, end}
	h.msg = end

	// 5. programname and procid from the TAG (no more looking ahead).
	tag := payload[tagStart:end]
	k := 0
	for k < len(tag) && isPrint(tag[k]) && tag[k] != ':' && tag[k] != '[' && tag[k] != '/' {
		k++
	}
	h.app = span{tagStart, tagStart + k}
	for k := 0; k < len(tag); k++ {
		if tag[k] != '[' {
			continue
		}
		for e := k + 1; e < len(tag); e++ {
			if tag[e] == ']' {
				h.procid = span{tagStart + k + 1, tagStart + e}
				break
			}
		}
		break
	}
	h.tagMore = tagSaysMore(payload, h)
	return true
}

// tagSaysMore reports whether the TAG holds more than the app name, then
// optionally "[procid]", then optionally ':'. Only then is it worth a
// member of its own: "sshd[99]:" says nothing appname and procid do not,
// "dockerd/3f2a1b9c[1234]:" names a container they leave out.
func tagSaysMore(p []byte, h *rfc3164Header) bool {
	k := h.app.end
	if k < h.tag.end && p[k] == '[' && h.procid.off == k+1 && h.procid.end < h.tag.end {
		k = h.procid.end + 1 // past the ']'
	}
	if k < h.tag.end && p[k] == ':' {
		k++
	}
	return k != h.tag.end
}

// timestamp finds the timestamp at c, if any, and returns the cursor after
// it. A failed attempt read up to where it stopped, and up to two bytes
// further when that was the month name: h.far keeps track.
func (h *rfc3164Header) timestamp(c cursor) cursor {
	t, ok := c.timestamp3339(&h.stamp)
	if ok {
		h.ts = span{c.i, t.i}
		return t
	}
	h.far = max(h.far, t.i)
	if t, ok = c.timestamp3164(&h.stamp); ok {
		h.ts = span{c.i, t.i}
		return t
	}
	h.far = max(h.far, t.i+2)
	if c.peek() == ' ' && c.n > 1 {
		// HP ProCurve puts a space before its timestamp.
		c2 := cursor{p: c.p, i: c.i + 1, n: c.n - 1}
		if t, ok = c2.timestamp3164(&h.stamp); ok {
			h.ts = span{c.i, t.i}
			return t
		}
		h.far = max(h.far, t.i+2)
		// So does srslog's default format before an RFC 3339 one; rsyslog
		// stops here, syslog-ng reads it (see the file's comment).
		if t, ok = c2.timestamp3339(&h.stamp); ok {
			h.ts = span{c.i, t.i}
			h.spaced = true
			return t
		}
		h.far = max(h.far, t.i)
	}
	return c
}

// cursor walks a payload the way rsyslog's parsers walk its NUL-terminated
// copy: n is the number of bytes rsyslog believes are left, and a byte read
// at or past the end of the payload is 0, which matches nothing a parser
// looks for. (rsyslog turns a NUL inside the message into "#000" before
// parsing; neither a 0 nor a '#' matches, so the parse is the same.)
type cursor struct {
	p []byte
	i int
	n int
}

func (c *cursor) at(i int) byte {
	if i < len(c.p) {
		return c.p[i]
	}
	return 0
}

func (c *cursor) peek() byte { return c.at(c.i) }

// expect consumes b if it is next and within the bytes left.
func (c *cursor) expect(b byte) bool {
	if c.n == 0 || c.peek() != b {
		return false
	}
	c.i++
	c.n--
	return true
}

// number reads decimal digits as rsyslog's srSLMGParseInt32 does: no digit
// reads as 0, and digits stop being taken once the value reaches 214748363,
// so it stays within an int32.
func (c *cursor) number() int {
	v := 0
	for c.n > 0 && isDigit(c.peek()) && v < 214748363 {
		v = v*10 + int(c.peek()-'0')
		c.i++
		c.n--
	}
	return v
}

// fraction reads the digits after a '.' (which the caller consumed).
func (c *cursor) fraction(st *stamp) {
	from := c.i
	st.frac = c.number()
	st.fracDigits = c.i - from
}

// minutesSeconds reads "mm:ss[.fraction]" after an hour and its colon, as
// both the RFC 3339 and the BSD timestamp write it; false if out of range.
func (c *cursor) minutesSeconds(st *stamp) bool {
	if st.minute = c.number(); st.minute > 59 || !c.expect(':') {
		return false
	}
	if st.sec = c.number(); st.sec > 60 {
		return false
	}
	if c.n > 0 && c.peek() == '.' {
		c.i++
		c.n--
		c.fraction(st)
	}
	return true
}

// timestamp3339 parses an RFC 3339 timestamp at c, as rsyslog's
// ParseTIMESTAMP3339: on success it returns the cursor after the timestamp
// and the SP that follows it, and fills st.
func (c cursor) timestamp3339(st *stamp) (cursor, bool) {
	var s stamp
	s.year = c.number()
	if !c.expect('-') || s.year >= 2100 {
		return c, false
	}
	if s.month = c.number(); s.month < 1 || s.month > 12 || !c.expect('-') {
		return c, false
	}
	if s.day = c.number(); s.day < 1 || s.day > 31 || !c.expect('T') {
		return c, false
	}
	if s.hour = c.number(); s.hour > 23 || !c.expect(':') {
		return c, false
	}
	if !c.minutesSeconds(&s) {
		return c, false
	}
	if c.n == 0 {
		return c, false // a zone is required
	}
	switch sign := c.peek(); sign {
	case 'Z':
		c.i++
		c.n--
	case '+', '-':
		c.i++
		c.n--
		h := c.number()
		if h > 23 || !c.expect(':') {
			return c, false
		}
		m := c.number()
		if m > 59 {
			return c, false
		}
		s.offset = h*3600 + m*60
		if sign == '-' {
			s.offset = -s.offset
		}
	default:
		return c, false
	}
	if c.n > 0 && !c.expect(' ') {
		return c, false
	}
	s.hasYear, s.zoned = true, true
	*st = s
	return c, true
}

// month returns the number of the month an RFC 3164 timestamp names in its
// three bytes, in any case, or 0.
func month(a, b, c byte) int {
	// b|0x20 lowers an ASCII letter and maps no other byte to one.
	switch uint32(a|0x20)<<16 | uint32(b|0x20)<<8 | uint32(c|0x20) {
	case 'j'<<16 | 'a'<<8 | 'n':
		return 1
	case 'f'<<16 | 'e'<<8 | 'b':
		return 2
	case 'm'<<16 | 'a'<<8 | 'r':
		return 3
	case 'a'<<16 | 'p'<<8 | 'r':
		return 4
	case 'm'<<16 | 'a'<<8 | 'y':
		return 5
	case 'j'<<16 | 'u'<<8 | 'n':
		return 6
	case 'j'<<16 | 'u'<<8 | 'l':
		return 7
	case 'a'<<16 | 'u'<<8 | 'g':
		return 8
	case 's'<<16 | 'e'<<8 | 'p':
		return 9
	case 'o'<<16 | 'c'<<8 | 't':
		return 10
	case 'n'<<16 | 'o'<<8 | 'v':
		return 11
	case 'd'<<16 | 'e'<<8 | 'c':
		return 12
	}
	return 0
}

// timestamp3164 parses "[yyyy ]Mmm dd [yyyy ]hh:mm:ss[.frac][:]" at c, as
// rsyslog's ParseTIMESTAMP3164 with the flags pmrfc3164 passes (no time
// zone name, no year after the time). The month is case-insensitive, a day
// may be padded with a space, and a "year" in the hour's place (1971-2099)
// is taken as the year, as Cisco devices send it.
func (c cursor) timestamp3164(st *stamp) (cursor, bool) {
	var s stamp
	if c.n < 3 {
		return c, false
	}
	if isDigit(c.peek()) {
		// A year before the month (Brocade). rsyslog steps over the SP
		// after it without counting it, so from here its count of the
		// bytes left is one too large; we keep the same count, and with
		// it rsyslog's view of where the payload ends.
		s.year = c.number()
		if s.year < 1970 || s.year > 2100 || c.peek() != ' ' {
			return c, false
		}
		c.i++
		s.hasYear = true
	}
	if s.month = month(c.at(c.i), c.at(c.i+1), c.at(c.i+2)); s.month == 0 {
		return c, false
	}
	c.i += 3
	c.n -= 3
	if !c.expect(' ') {
		return c, false
	}
	if c.peek() == ' ' { // "Nov  3"
		c.i++
		c.n--
	}
	if s.day = c.number(); s.day < 1 || s.day > 31 || !c.expect(' ') {
		return c, false
	}
	s.hour = c.number()
	if !s.hasYear && s.hour > 1970 && s.hour < 2100 {
		s.year, s.hasYear = s.hour, true
		if !c.expect(' ') {
			return c, false
		}
		s.hour = c.number()
	}
	if s.hour > 23 || !c.expect(':') {
		return c, false
	}
	if !c.minutesSeconds(&s) {
		return c, false
	}
	if c.n > 0 && c.peek() == ':' { // Cisco: "hh:mm:ss: "
		c.i++
		c.n--
	}
	if c.n > 0 && !c.expect(' ') {
		return c, false
	}
	*st = s
	return c, true
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

func isAlnum(b byte) bool { return isDigit(b) || (b|0x20 >= 'a' && b|0x20 <= 'z') }

// isHostnameByte is rsyslog's hostname alphabet with its defaults (no
// brackets, '@' or '/').
func isHostnameByte(b byte) bool { return isAlnum(b) || b == '.' || b == '_' || b == '-' }

// isPrint is C's isprint for single bytes as rsyslog sees them: printable
// ASCII (a byte above 0x7f is not a character on its own).
func isPrint(b byte) bool { return b >= 0x20 && b < 0x7f }
