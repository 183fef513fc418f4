package record

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
	"unsafe"

	"github.com/ipclab/logagg/internal/jsonstr"
)

// maxDepth bounds the nesting of arrays and objects the JSON fast path
// accepts. Deeper input is kept as a malformed message; the bound keeps the
// scanner's state in two words and documents a limit producers can rely on.
const maxDepth = 128

// objInfo is what scanObject learned about a valid object.
type objInfo struct {
	end     int   // index just past the closing '}'
	members int   // number of top-level members
	flags   Flags // FlagReservedKey (a top-level key is "agg"), FlagDuplicateKey
	newline bool  // '\n' or '\r' occur as whitespace between tokens
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// load64 is the little-endian word at b[i:i+8], which the caller has
// checked is in b: without the bounds checks the compiler cannot drop.
func load64(b []byte, i int) uint64 {
	return binary.LittleEndian.Uint64(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), i)), 8))
}

// strPlain marks the ASCII bytes that stand for themselves inside a JSON
// string, so the hot loop of scanString is one table load per byte.
var strPlain = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// Scanner states.
const (
	stValue = iota // a value must follow
	stKey          // an object key must follow
	stAfter        // a value ended; ',' or a closing bracket must follow
)

// scanObject validates the JSON object that starts at b[0] (the caller
// guarantees b[0] == '{') and reports where it ends. Bytes after the object
// are not looked at. It allocates nothing once tk's scratch has grown.
//
// The top level, where a log record keeps nearly all of its members, is
// scanned by straight-line code: key, ':', value, ',' or '}'. A nested
// object or array value is handed to scanNested. The generic state machine
// alone cost about 7 ns per token, which made validation 45 % of the
// aggregator's CPU on short records at shm rates; with the cheaper word
// test of jsonstr.SpecialBytes a producer-shaped record went from 164 to
// 112 ns (BenchmarkAppendJSON/seq). FuzzScanObjectMatchesNested checks that
// both scanners agree on every input.
//
// The top-level keys are checked for "agg" (listed in tk.aggs, flagged
// reserved_key) and for repeated names (flagged duplicate_key); keys.go
// says how. A key equal to the one the key dictionary predicts is not
// scanned again.
func scanObject(b []byte, tk *topKeys) (objInfo, bool) {
	var info objInfo
	tk.reset()
	d := &tk.dict
	var ids, dups uint64 // the IDs of the keys so far, and of those seen twice
	prev := 0            // where in d.next the prediction for the next key is
	n := len(b)
	i := skipSpace(b, 1, &info)
	if i < n && b[i] == '}' {
		info.end = i + 1
		return info, true
	}
	for {
		if i >= n || b[i] != '"' {
			return info, false
		}
		j, id := 0, -1
		if p := d.next[prev&(len(d.next)-1)]; p != 0 {
			// The predicted key; equal bytes mean a valid key.
			dk := &d.keys[(p-1)&(dictKeys-1)]
			if i+17 <= n {
				if (load64(b, i+1)&dk.mlo^dk.lo)|(load64(b, i+9)&dk.mhi^dk.hi) == 0 &&
					(dk.size <= 16 || matchText(b, i, dk, d.text, 16)) {
					j, id = i+1+dk.size, int(p-1)
				}
			} else if matchText(b, i, dk, d.text, 0) {
				j, id = i+1+dk.size, int(p-1)
			}
		}
		if j == 0 {
			var ok bool
			if j, id, ok = tk.newKey(b, i); !ok {
				return info, false
			}
			d.next[prev&(len(d.next)-1)] = uint8(id + 1)
		}
		if id >= 0 {
			bit := uint64(1) << (uint(id) & (dictKeys - 1))
			dups |= ids & bit
			ids |= bit
			prev = id + 1
		} else {
			prev = afterUnknown
		}
		info.members++
		key := i
		i = skipSpace(b, j, &info)
		if i >= n || b[i] != ':' {
			return info, false
		}
		i = skipSpace(b, i+1, &info)
		if i >= n {
			return info, false
		}
		var ok bool
		val := i
		switch c := b[i]; {
		case c == '"':
			if i, _, ok = scanString(b, i+1); !ok {
				return info, false
			}
		case c == '-' || (c >= '0' && c <= '9'):
			if i, ok = scanNumber(b, i); !ok {
				return info, false
			}
		case c == '{' || c == '[':
			// The top level is one of maxDepth levels.
			sub, ok := scanNested(b[i:], maxDepth-1, nil)
			if !ok {
				return info, false
			}
			info.newline = info.newline || sub.newline
			i += sub.end
		case c == 't' && hasLiteral(b[i:], "true"), c == 'n' && hasLiteral(b[i:], "null"):
			i += 4
		case c == 'f' && hasLiteral(b[i:], "false"):
			i += 5
		default:
			return info, false
		}
		if k := info.members - 1; k < MaxIndexedMembers {
			tk.index.spans[k] = MemberSpan{Key: int32(key), Val: int32(val), End: int32(i)}
		}
		i = skipSpace(b, i, &info)
		if i >= n {
			return info, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1, &info)
		case '}':
			info.end = i + 1
			tk.index.n = info.members
			if dups != 0 {
				tk.flags |= FlagDuplicateKey
			}
			if tk.flags != 0 || tk.fallback || len(tk.loose) != 0 {
				info.flags = tk.finish(b, info.members)
			}
			return info, true
		default:
			return info, false
		}
	}
}

// skipSpace returns the index of the first non-whitespace byte at or after
// b[i], noting in info whether a line break was skipped.
func skipSpace(b []byte, i int, info *objInfo) int {
	for i < len(b) && b[i] <= ' ' && isJSONSpace(b[i]) {
		if b[i] != ' ' && b[i] != '\t' {
			info.newline = true
		}
		i++
	}
	return i
}

// scanNested validates the object or array that starts at b[0] with at most
// limit levels of nesting, itself included, and reports where it ends. With
// a non-nil tk it also counts and checks the keys of an outermost object,
// by the plain method: every key hashed at the end, without the key
// dictionary (FuzzScanObjectMatchesNested compares it with scanObject);
// scanObject passes nil for nested values. It is an iterative state
// machine, so hostile nesting cannot grow the stack.
func scanNested(b []byte, limit int, tk *topKeys) (objInfo, bool) {
	var info objInfo
	if tk != nil {
		tk.reset()
		tk.quotes = tk.quotes[:0]
	}
	var isObj [maxDepth / 64]uint64 // bit d set: level d is an object, clear: an array
	depth := 0
	st := stValue
	i, n := 0, len(b)
	for {
		if st == stAfter && depth == 0 {
			info.end = i
			if tk != nil && tk.dupAmong(b, tk.quotes) {
				info.flags |= FlagDuplicateKey
			}
			return info, true
		}
		for i < n && isJSONSpace(b[i]) {
			if b[i] != ' ' && b[i] != '\t' {
				info.newline = true
			}
			i++
		}
		if i >= n {
			return info, false
		}
		c := b[i]
		switch st {
		case stValue:
			switch {
			case c == '{' || c == '[':
				if depth == limit {
					return info, false
				}
				closer := byte(']')
				if c == '{' {
					isObj[depth>>6] |= 1 << (depth & 63)
					closer = '}'
					st = stKey
				} else {
					isObj[depth>>6] &^= 1 << (depth & 63)
					st = stValue
				}
				depth++
				i++
				for i < n && isJSONSpace(b[i]) {
					if b[i] != ' ' && b[i] != '\t' {
						info.newline = true
					}
					i++
				}
				if i < n && b[i] == closer {
					i++
					depth--
					st = stAfter
				}
			case c == '"':
				j, _, ok := scanString(b, i+1)
				if !ok {
					return info, false
				}
				i, st = j, stAfter
			case c == '-' || (c >= '0' && c <= '9'):
				j, ok := scanNumber(b, i)
				if !ok {
					return info, false
				}
				i, st = j, stAfter
			case c == 't':
				if !hasLiteral(b[i:], "true") {
					return info, false
				}
				i, st = i+4, stAfter
			case c == 'f':
				if !hasLiteral(b[i:], "false") {
					return info, false
				}
				i, st = i+5, stAfter
			case c == 'n':
				if !hasLiteral(b[i:], "null") {
					return info, false
				}
				i, st = i+4, stAfter
			default:
				return info, false
			}
		case stKey:
			if c != '"' {
				return info, false
			}
			j, esc, ok := scanString(b, i+1)
			if !ok {
				return info, false
			}
			if depth == 1 && tk != nil {
				if keyIsAgg(b[i+1:j-1], esc) {
					info.flags |= FlagReservedKey
					tk.aggs = append(tk.aggs, i)
				}
				tk.quotes = append(tk.quotes, i)
				info.members++
			}
			i = j
			for i < n && isJSONSpace(b[i]) {
				if b[i] != ' ' && b[i] != '\t' {
					info.newline = true
				}
				i++
			}
			if i >= n || b[i] != ':' {
				return info, false
			}
			i++
			st = stValue
		case stAfter:
			top := isObj[(depth-1)>>6]&(1<<((depth-1)&63)) != 0
			switch {
			case c == ',':
				i++
				if top {
					st = stKey
				} else {
					st = stValue
				}
			case (c == '}' && top) || (c == ']' && !top):
				i++
				depth--
			default:
				return info, false
			}
		}
	}
}

func hasLiteral(b []byte, lit string) bool {
	return len(b) >= len(lit) && string(b[:len(lit)]) == lit
}

// scanString scans a string whose opening quote is just before b[i]. It
// returns the index after the closing quote and whether the string contains
// escapes. Raw control characters and invalid UTF-8 make it fail: the output
// must be valid JSON and valid UTF-8 when it is copied verbatim.
func scanString(b []byte, i int) (end int, esc, ok bool) {
	n := len(b)
	for i < n {
		if i+8 <= n {
			// Eight bytes at a time: skip a word of plain ASCII, or jump
			// to its first byte that needs a look.
			if sp := jsonstr.SpecialBytes(binary.LittleEndian.Uint64(b[i:])); sp == 0 {
				i += 8
				continue
			} else {
				i += bits.TrailingZeros64(sp) >> 3
			}
		}
		c := b[i]
		if c == '"' { // most often the byte the word scan stopped at
			return i + 1, esc, true
		}
		if c < utf8.RuneSelf {
			if strPlain[c] {
				i++
				continue
			}
			switch c {
			case '\\':
				esc = true
				if i+1 >= n {
					return 0, false, false
				}
				switch b[i+1] {
				case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
					i += 2
				case 'u':
					if i+6 > n || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
						return 0, false, false
					}
					i += 6
				default:
					return 0, false, false
				}
			default: // raw control character
				return 0, false, false
			}
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return 0, false, false
		}
		i += size
	}
	return 0, false, false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func hexVal(c byte) rune {
	switch {
	case c >= '0' && c <= '9':
		return rune(c - '0')
	case c >= 'a' && c <= 'f':
		return rune(c - 'a' + 10)
	default:
		return rune(c - 'A' + 10)
	}
}

// scanNumber scans a JSON number starting at b[i] and returns the index
// after it. What follows is checked by the caller's state machine.
func scanNumber(b []byte, i int) (int, bool) {
	n := len(b)
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= n:
		return 0, false
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		for i < n && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return 0, false
	}
	if i < n && b[i] == '.' {
		i++
		d := i
		for i < n && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return 0, false
		}
	}
	if i < n && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < n && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < n && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return 0, false
		}
	}
	return i, true
}

// keyIsAgg reports whether the raw (already validated) contents of a key
// string decode to "agg". Escaped spellings such as "\u0061gg" count: a
// JSON decoder reading our output would see them as "agg".
func keyIsAgg(raw []byte, esc bool) bool {
	const want = "agg"
	if !esc {
		return string(raw) == want
	}
	k := 0
	for i := 0; i < len(raw); {
		var r rune
		if raw[i] == '\\' {
			if raw[i+1] == 'u' {
				r = hexVal(raw[i+2])<<12 | hexVal(raw[i+3])<<8 | hexVal(raw[i+4])<<4 | hexVal(raw[i+5])
				i += 6
			} else {
				r = rune(raw[i+1]) // '"', '\\', '/' stand for themselves; b, f, n, r, t never match
				i += 2
			}
		} else {
			r = rune(raw[i])
			i++
		}
		if k == len(want) || r != rune(want[k]) {
			return false
		}
		k++
	}
	return k == len(want)
}
