// Package jsonstr appends JSON string contents without allocating. The
// aggregator's encoder and the public client share it, so a record is
// escaped the same way on both sides of a socket.
package jsonstr

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
	"unsafe"
)

const hexDigits = "0123456789abcdef"

// Found says what AppendEscaped replaced or escaped besides the ordinary
// escapes of '"', '\\', TAB, LF and CR (which are text, not findings).
type Found uint8

const (
	InvalidUTF8 Found = 1 << iota // invalid UTF-8, replaced by U+FFFD
	NUL                           // NUL (0x00), escaped as \u0000
	Control                       // another C0 control (0x01-0x1f but TAB, LF, CR), escaped as \u00XX
)

// AppendEscaped appends s escaped for use inside a JSON string literal
// (without the quotes). Invalid UTF-8 becomes U+FFFD and C0 control bytes
// are escaped, so the output is always valid JSON whatever the input; found
// reports which of those happened. TAB, LF and CR are escaped as \t, \n
// and \r and not reported: they are ordinary text in multi-line messages.
// DEL (0x7f) is valid in a JSON string and passes through unreported: a
// word test that also stops at it costs one more operation per eight bytes,
// 2-5 % on the JSON fast path (docs/adr/).
func AppendEscaped(dst, s []byte) (out []byte, found Found) {
	start := 0
	for i := 0; i < len(s); {
		if i+8 <= len(s) {
			// Skip a word of bytes that stand for themselves, or jump to
			// the first one that needs a look.
			if sp := SpecialBytes(binary.LittleEndian.Uint64(s[i:])); sp == 0 {
				i += 8
				continue
			} else {
				i += bits.TrailingZeros64(sp) >> 3
			}
		}
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
				if c == 0 {
					found |= NUL
				} else {
					found |= Control
				}
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
			found |= InvalidUTF8
			i++
			start = i
			continue
		}
		i += size
	}
	return append(dst, s[start:]...), found
}

// SWAR constants: one bit or one unit per byte of a little-endian word.
const (
	swarOnes = 0x0101010101010101
	swarHigh = 0x8080808080808080
)

// SpecialBytes flags (with its high bit) every byte of the little-endian
// word x that cannot stand for itself inside a JSON string: non-ASCII
// (which must be checked as UTF-8), below 0x20, '"' or '\\'. Only the lowest
// flag is exact (see below), which is all a scan for the first such byte
// needs. For the mostly-ASCII strings of log records this makes long values
// cheap to validate and escape (BenchmarkAppendJSON/1KiB in internal/record,
// BenchmarkAppendEscaped here).
//
// For an ASCII byte c, c+0x60 has its high bit set exactly when c >= 0x20,
// and (c^q)+0x7f exactly when c != q; neither sum carries out of its byte.
// A non-ASCII byte may carry into the byte above it, but it is flagged
// itself by x&swarHigh, so the lowest flag, the one callers use, is always
// exact. This takes ten operations where subtract-and-mask tests took
// sixteen.
//
// DEL (0x7f) is not flagged. Flagging it too, as ((x+swarOnes) | ^plain)
// & swarHigh (c+1 sets the high bit of DEL and of every non-ASCII byte but
// 0xff, which c+0x60 catches), is one more operation per word and measured
// 2-5 % slower on BenchmarkAppendJSON and BenchmarkAppendEscaped, so DEL
// is not reported as control_chars (docs/adr/).
func SpecialBytes(x uint64) uint64 {
	plain := (x + swarOnes*0x60) & // >= 0x20
		((x ^ swarOnes*'"') + swarOnes*0x7f) & // not '"'
		((x ^ swarOnes*'\\') + swarOnes*0x7f) // not '\\'
	return (x | ^plain) & swarHigh
}

// AppendEscapedString is AppendEscaped for a string, without copying it.
func AppendEscapedString(dst []byte, s string) []byte {
	dst, _ = AppendEscaped(dst, unsafe.Slice(unsafe.StringData(s), len(s)))
	return dst
}
