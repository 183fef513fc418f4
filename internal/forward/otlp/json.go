package otlp

import (
	"bytes"
	"encoding/binary"
	"math/bits"

	"github.com/ipclab/logagg/internal/jsonstr"
)

// A small reader of the output's JSON lines: it finds values' extents
// without decoding them, so that a line becomes a LogRecord in one pass
// and nested values are read only where they are encoded. Lines the
// aggregator wrote are valid JSON; anything else makes split report false
// and the line is sent whole.

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipBlank(b []byte, i int) int {
	for i < len(b) && isBlank(b[i]) {
		i++
	}
	return i
}

// skipString returns the index after the string whose opening quote is at
// b[i], or -1.
func skipString(b []byte, i int) int {
	i++
	for i < len(b) {
		if i+8 <= len(b) {
			// Eight bytes at a time while none is a quote, a backslash,
			// a control byte or non-ASCII (jsonstr's test).
			if sp := jsonstr.SpecialBytes(binary.LittleEndian.Uint64(b[i:])); sp == 0 {
				i += 8
				continue
			} else {
				i += bits.TrailingZeros64(sp) >> 3
			}
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			i += 2 // an escape: skip the escaped byte
		default:
			i++
		}
	}
	return -1
}

// maxNesting bounds the depth skipValue follows (the aggregator's encoder
// accepts 128 levels).
const maxNesting = 256

// skipValue returns the index after the JSON value that starts at b[i],
// or -1 when it is malformed or cut short.
func skipValue(b []byte, i int) int {
	i = skipBlank(b, i)
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; c {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				if i = skipString(b, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
				if depth > maxNesting {
					return -1
				}
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	default:
		j := i
		for j < len(b) {
			c := b[j]
			if c == ',' || c == '}' || c == ']' || isBlank(c) {
				break
			}
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
}

// eachMember calls fn with the raw name (between its quotes, escapes kept)
// and raw value of every member of object obj, until fn returns false. It
// reports false when obj is not a well-formed object.
func eachMember(obj []byte, fn func(name, val []byte) bool) bool {
	return memberScan(obj, fn) >= 0
}

// memberScan is eachMember returning the index after the object's '}'
// (or after the member where fn stopped it), -1 when malformed.
func memberScan(obj []byte, fn func(name, val []byte) bool) int {
	i := skipBlank(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return -1
	}
	i = skipBlank(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return i + 1
	}
	for i < len(obj) {
		if obj[i] != '"' {
			return -1
		}
		end := skipString(obj, i)
		if end < 0 {
			return -1
		}
		name := obj[i+1 : end-1]
		i = skipBlank(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return -1
		}
		i = skipBlank(obj, i+1)
		vend := skipValue(obj, i)
		if vend < 0 {
			return -1
		}
		if !fn(name, obj[i:vend]) {
			return vend
		}
		i = skipBlank(obj, vend)
		if i >= len(obj) {
			return -1
		}
		switch obj[i] {
		case ',':
			i = skipBlank(obj, i+1)
		case '}':
			return i + 1
		default:
			return -1
		}
	}
	return -1
}

// eachElement calls fn with every element of array arr.
func eachElement(arr []byte, fn func(v []byte) bool) bool {
	i := skipBlank(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return false
	}
	i = skipBlank(arr, i+1)
	if i < len(arr) && arr[i] == ']' {
		return true
	}
	for i < len(arr) {
		end := skipValue(arr, i)
		if end < 0 {
			return false
		}
		if !fn(arr[i:end]) {
			return true
		}
		i = skipBlank(arr, end)
		if i >= len(arr) {
			return false
		}
		switch arr[i] {
		case ',':
			i = skipBlank(arr, i+1)
		case ']':
			return true
		default:
			return false
		}
	}
	return false
}

// objectMember returns the raw value of the first member called name (no
// escapes in its name) of object obj, or nil.
func objectMember(obj []byte, name string) []byte {
	if len(obj) == 0 || obj[0] != '{' {
		return nil
	}
	var out []byte
	eachMember(obj, func(n, v []byte) bool {
		if string(n) == name {
			out = v
			return false
		}
		return true
	})
	return out
}

// split reads the top-level members of line into e.members (names
// unescaped); false when the line is not one JSON object.
func (e *lineEncoder) split(line []byte) bool {
	e.members = e.members[:0]
	end := memberScan(line, func(name, val []byte) bool {
		if bytes.IndexByte(name, '\\') >= 0 {
			name = unescape(nil, name) // rare: a name written with escapes
		}
		e.members = append(e.members, member{name: name, val: val})
		return true
	})
	return end >= 0 && skipBlank(line, end) == len(line)
}

// name is a raw member name unescaped (in e.nbuf when it had escapes:
// valid until the next call).
func (e *lineEncoder) name(raw []byte) []byte {
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw
	}
	e.nbuf = unescape(e.nbuf[:0], raw)
	return e.nbuf
}
