// Package jsonstr appends JSON string contents without allocating. The
// aggregator's encoder and the public client share it, so a record is
// escaped the same way on both sides of a socket.
package jsonstr

import (
	"unicode/utf8"
	"unsafe"
)

const hexDigits = "0123456789abcdef"

// AppendEscaped appends s escaped for use inside a JSON string literal
// (without the quotes). Invalid UTF-8 becomes U+FFFD and control bytes are
// escaped, so the output is always valid JSON whatever the input; the two
// results report whether either happened (other than \n, \r and \t, which
// are ordinary text).
func AppendEscaped(dst, s []byte) (out []byte, invalidUTF8, control bool) {
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
				control = true
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
			invalidUTF8 = true
			i++
			start = i
			continue
		}
		i += size
	}
	return append(dst, s[start:]...), invalidUTF8, control
}

// AppendEscapedString is AppendEscaped for a string, without copying it.
func AppendEscapedString(dst []byte, s string) []byte {
	dst, _, _ = AppendEscaped(dst, unsafe.Slice(unsafe.StringData(s), len(s)))
	return dst
}
