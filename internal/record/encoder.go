package record

import (
	"strconv"
	"unicode/utf8"
)

// Encoder turns record payloads into JSON lines. The zero value is not
// usable; call NewEncoder.
//
// INTERIM: this version treats every payload as plain text. The decoders
// (JSON fast path, RFC 3164, RFC 5424) replace it.
type Encoder struct{}

// NewEncoder returns an Encoder.
func NewEncoder() *Encoder { return &Encoder{} }

// Append decodes payload (one record, framing removed, no trailing newline),
// appends its JSON line including the trailing '\n' to dst, and returns the
// extended slice. in carries flags the framer already knows (FlagTruncated,
// FlagPartial, FlagFraming); they are included in the result and the output.
// Append never fails: input it cannot decode is kept as a raw message and
// flagged.
func (e *Encoder) Append(dst, payload []byte, m *Meta, in Flags) ([]byte, Result) {
	res := Result{Format: FormatRaw, Flags: in}
	dst = append(dst, `{"message":`...)
	var f Flags
	dst, f = appendJSONStringBytes(dst, payload)
	res.Flags |= f
	return appendAgg(dst, m, res), res
}

// appendAgg closes a record with the "agg" object and the newline.
func appendAgg(dst []byte, m *Meta, res Result) []byte {
	dst = append(dst, `,"agg":{"recv_ns":`...)
	dst = strconv.AppendInt(dst, m.RecvNS, 10)
	dst = append(dst, m.static...)
	dst = append(dst, `,"format":"`...)
	dst = append(dst, res.Format.String()...)
	dst = append(dst, '"')
	if res.Flags != 0 {
		dst = append(dst, `,"flags":[`...)
		first := true
		res.Flags.Each(func(n string) {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(dst, '"')
			dst = append(dst, n...)
			dst = append(dst, '"')
		})
		dst = append(dst, ']')
	}
	return append(dst, "}}\n"...)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string literal.
func appendJSONString(dst []byte, s string) []byte {
	dst, _ = appendJSONStringBytes(dst, []byte(s))
	return dst
}

// appendJSONStringBytes appends s as a JSON string literal. Invalid UTF-8 is
// replaced by U+FFFD and reported as FlagInvalidUTF8; NUL and other control
// bytes are escaped and reported as FlagNUL, so the output is always valid
// JSON whatever the input.
func appendJSONStringBytes(dst, s []byte) ([]byte, Flags) {
	var flags Flags
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				flags |= FlagNUL
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			flags |= FlagInvalidUTF8
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"'), flags
}
