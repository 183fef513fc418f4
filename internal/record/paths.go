package record

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strconv"
	"strings"

	"unicode/utf8"
)

// Paths is a compiled set of member paths of a JSON object, found together
// by one scan of the object (Find): the rules' field matches and the Kafka
// forwarder's key and timestamp read records this way, never one parse per
// field.
//
// A path is member names joined by dots: "http.status" is the member
// "status" of the object that is the member "http" of the record;
// "agg.recv_ns" is our own receive time in an output line. A member whose
// name holds a dot, or is written with escapes, cannot be named. When an
// object repeats a member name, the first one counts (see Find).
//
// A Paths is immutable once compiled and safe for concurrent use.
type Paths struct {
	paths []string
	nodes []pathNode // nodes[0] is the record itself
	depth int        // longest path, in members
}

type pathNode struct {
	key      string
	leaf     int    // index of the path that ends here, or -1
	children []int  // indexes into nodes
	lens     uint64 // bit min(len(key), 63) of each child: most names are passed by this test alone
}

// Kind is the JSON type of a found value.
type Kind uint8

const (
	KindMissing Kind = iota
	KindString
	KindNumber
	KindBool
	KindNull
	KindObject
	KindArray
)

// Value is one found member: its raw JSON text (a string with its quotes
// and escapes, a number as written, a whole object or array).
type Value struct {
	Raw  []byte
	Kind Kind
}

// CompilePaths compiles paths; Find fills its results in this order.
func CompilePaths(paths ...string) *Paths {
	p := &Paths{paths: paths, nodes: []pathNode{{leaf: -1}}}
	for i, path := range paths {
		n := 0
		parts := strings.Split(path, ".")
		p.depth = max(p.depth, len(parts))
		for _, part := range parts {
			next := -1
			for _, c := range p.nodes[n].children {
				if p.nodes[c].key == part {
					next = c
					break
				}
			}
			if next < 0 {
				next = len(p.nodes)
				p.nodes = append(p.nodes, pathNode{key: part, leaf: -1})
				p.nodes[n].children = append(p.nodes[n].children, next)
				p.nodes[n].lens |= 1 << min(len(part), 63)
			}
			n = next
		}
		p.nodes[n].leaf = i
	}
	return p
}

// Len is the number of paths.
func (p *Paths) Len() int { return len(p.paths) }

// Find scans the JSON object b and sets vals[i] to the value of path i
// (KindMissing when absent; vals must have Len elements). The scan stops
// once every path is found: when an object repeats a member name, the
// first one counts (the encoder flags a record whose top-level names
// repeat, duplicate_key). It reports false when b is not an object or is
// cut short; what was found before is kept. It never reads outside b and
// does not allocate.
func (p *Paths) Find(b []byte, vals []Value) bool {
	clear(vals)
	left := len(p.paths)
	i := skipBlank(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	return p.scan(b, i+1, 0, vals, &left)
}

// scan finds the paths below node in the object of b whose members start
// at b[i] (after its '{'), counting down *left; it returns at that
// object's end, or once *left is 0.
func (p *Paths) scan(b []byte, i, node int, vals []Value, left *int) bool {
	var stack [maxPathDepth]int
	sp := 0
	for {
		if i < len(b) && isJSONSpace(b[i]) {
			i = skipBlank(b, i)
		}
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case '}':
			i++
			if sp == 0 {
				return true
			}
			sp--
			node = stack[sp]
			continue
		case ',':
			i++
			continue
		case '"':
		default:
			return false
		}
		end, ok := skipString(b, i+1)
		if !ok {
			return false
		}
		// A name we look for holds no backslash, so bytes equal to it are
		// the name itself, never an escaped spelling.
		child := p.child(node, b[i+1:end-1])
		i = end
		if i < len(b) && b[i] != ':' {
			i = skipBlank(b, i)
		}
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i++
		if i < len(b) && isJSONSpace(b[i]) {
			i = skipBlank(b, i)
		}
		if i >= len(b) {
			return false
		}
		if child >= 0 && b[i] == '{' && len(p.nodes[child].children) > 0 && sp < len(stack) {
			if leaf := p.nodes[child].leaf; leaf >= 0 && vals[leaf].Kind == KindMissing {
				if e, ok := skipValue(b, i); ok {
					vals[leaf] = Value{Raw: b[i:e], Kind: KindObject}
					*left--
				}
			}
			stack[sp] = node
			sp++
			node = child
			i++
			continue
		}
		start := i
		e, ok := skipValue(b, i)
		if !ok {
			return false
		}
		if child >= 0 {
			if leaf := p.nodes[child].leaf; leaf >= 0 && vals[leaf].Kind == KindMissing {
				vals[leaf] = Value{Raw: b[start:e], Kind: kindOf(b[start])}
				if *left--; *left == 0 {
					return true
				}
			}
		}
		i = e
	}
}

// maxPathDepth bounds the nesting a path may name.
const maxPathDepth = 16

func (p *Paths) child(n int, key []byte) int {
	nd := &p.nodes[n]
	if nd.lens&(1<<min(len(key), 63)) == 0 {
		return -1
	}
	for _, c := range nd.children {
		if p.nodes[c].key == string(key) {
			return c
		}
	}
	return -1
}

func kindOf(c byte) Kind {
	switch c {
	case '"':
		return KindString
	case '{':
		return KindObject
	case '[':
		return KindArray
	case 't', 'f':
		return KindBool
	case 'n':
		return KindNull
	}
	return KindNumber
}

func skipBlank(b []byte, i int) int {
	for i < len(b) && isJSONSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the index after the closing quote of the string whose
// contents start at b[i]. Names and values in log records are short, so it
// looks at eight bytes at a time itself rather than calling IndexByte per
// string.
func skipString(b []byte, i int) (int, bool) {
	n := len(b)
	for i < n {
		if i+8 <= n {
			w := binary.LittleEndian.Uint64(b[i:])
			m := zeroByte(w^quotes) | zeroByte(w^backslashes)
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) / 8
		}
		switch b[i] {
		case '"':
			return i + 1, true
		case '\\':
			i += 2
		default:
			i++
		}
	}
	return 0, false
}

const (
	quotes      = 0x2222222222222222
	backslashes = 0x5c5c5c5c5c5c5c5c
	opens       = 0x7b7b7b7b7b7b7b7b // {, and [ with bit 5 set
	closes      = 0x7d7d7d7d7d7d7d7d // }, and ] with bit 5 set
	lows        = 0x0101010101010101
	highs       = 0x8080808080808080
)

// zeroByte has the high bit set of the lowest zero byte of w (and maybe of
// higher ones, which the callers never look at).
func zeroByte(w uint64) uint64 { return (w - lows) &^ w & highs }

// structural marks the bytes skipValue stops at inside an object or array.
var structural = [256]bool{'"': true, '{': true, '[': true, '}': true, ']': true}

// skipValue returns the index after the JSON value at b[i]. Objects and
// arrays are skipped by counting brackets outside strings, which is all a
// value we do not look into needs.
func skipValue(b []byte, i int) (int, bool) {
	switch b[i] {
	case '"':
		return skipString(b, i+1)
	case '{', '[':
		depth := 0
		for i < len(b) {
			if i+8 <= len(b) {
				// Eight bytes at a time past everything but quotes and
				// brackets ('[' and ']' differ from '{' and '}' only in
				// bit 5, which the OR sets).
				w := binary.LittleEndian.Uint64(b[i:])
				lw := w | 0x2020202020202020
				if zeroByte(w^quotes)|zeroByte(lw^opens)|zeroByte(lw^closes) == 0 {
					i += 8
					continue
				}
			}
			c := b[i]
			if !structural[c] {
				i++
				continue
			}
			switch c {
			case '"':
				end, ok := skipString(b, i+1)
				if !ok {
					return 0, false
				}
				i = end
				continue
			case '{', '[':
				depth++
			default:
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return 0, false
	}
	j := i
	for j < len(b) && !isJSONSpace(b[j]) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
		j++
	}
	return j, j > i
}

// Text is a string value's contents; ok is false for other kinds. A
// string without escapes is a subslice of v.Raw; one with escapes is
// unescaped into *buf, which grows as needed and is reused by the caller.
func (v Value) Text(buf *[]byte) (text []byte, ok bool) {
	if v.Kind != KindString || len(v.Raw) < 2 {
		return nil, false
	}
	s := v.Raw[1 : len(v.Raw)-1 : len(v.Raw)-1]
	if bytes.IndexByte(s, '\\') < 0 {
		return s, true
	}
	*buf = appendUnescaped((*buf)[:0], s)
	return *buf, true
}

// appendUnescaped appends the contents of a JSON string, its escapes
// decoded as encoding/json decodes them. An escape cut short or invalid
// is kept as written, so any input is safe.
func appendUnescaped(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		j := bytes.IndexByte(s[i:], '\\')
		if j < 0 {
			return append(dst, s[i:]...)
		}
		dst = append(dst, s[i:i+j]...)
		i += j
		n := 2
		if i+1 < len(s) && s[i+1] == 'u' {
			n = 6
			if i+12 <= len(s) && s[i+6] == '\\' && s[i+7] == 'u' && validHex(s[i+2:i+6]) && validHex(s[i+8:i+12]) {
				n = 12 // maybe a surrogate pair; nextRune decides
			}
			if i+6 > len(s) || !validHex(s[i+2:i+6]) {
				dst = append(dst, s[i:min(i+2, len(s))]...)
				i += 2
				continue
			}
		}
		if i+n > len(s) {
			return append(dst, s[i:]...)
		}
		r, next := nextRune(s[:i+n], i, true)
		dst = utf8.AppendRune(dst, r)
		i = next
	}
	return dst
}

func validHex(b []byte) bool {
	for _, c := range b {
		if !isHex(c) {
			return false
		}
	}
	return true
}

// Int is a number value as an integer; ok is false for other kinds and
// for numbers with a fraction or exponent.
func (v Value) Int() (int64, bool) {
	if v.Kind != KindNumber {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v.Raw), 10, 64) // no allocation: the conversion does not escape
	return n, err == nil
}

// Float is a number value as a float64.
func (v Value) Float() (float64, bool) {
	if v.Kind != KindNumber {
		return 0, false
	}
	if r := v.Raw; len(r) > 0 && len(r) <= 15 {
		// A plain integer (a status code, a count) is exact in a float64
		// below 10^15: no need for the general parser.
		var n int64
		i := 0
		if r[0] == '-' {
			i = 1
		}
		for ; i < len(r) && '0' <= r[i] && r[i] <= '9'; i++ {
			n = n*10 + int64(r[i]-'0')
		}
		if i == len(r) && (r[0] != '-' || len(r) > 1) {
			if r[0] == '-' {
				return -float64(n), true
			}
			return float64(n), true
		}
	}
	f, err := strconv.ParseFloat(string(v.Raw), 64)
	return f, err == nil
}

// MaxIndexedMembers is how many top-level members of a JSON record the
// encoder notes the place of (Fields.Index); records are rarely wider.
const MaxIndexedMembers = 32

// MemberSpan is where one top-level member of a JSON object is: the
// opening quote of its name, and its value's first byte and the byte
// after it.
type MemberSpan struct{ Key, Val, End int32 }

// MemberIndex is where the top-level members of a valid JSON object are.
type MemberIndex struct {
	Object []byte // the object, '{' to '}'
	spans  [MaxIndexedMembers]MemberSpan
	n      int
}

// Members are the object's members in order, or nil when it has more
// than MaxIndexedMembers.
func (ix *MemberIndex) Members() []MemberSpan {
	if ix.n > MaxIndexedMembers {
		return nil
	}
	return ix.spans[:ix.n]
}

// FindMembers is Find for an object whose top-level members are already
// known (the encoder's Fields.Index): only the names are compared, and
// only the objects a path goes into are scanned. The results are Find's.
func (p *Paths) FindMembers(ix *MemberIndex, vals []Value) bool {
	members := ix.Members()
	if members == nil {
		return p.Find(ix.Object, vals)
	}
	clear(vals)
	left := len(p.paths)
	obj := ix.Object
	for _, m := range members {
		// The name ends at the quote before the ':' before the value.
		e := int(m.Val) - 1
		for isJSONSpace(obj[e]) {
			e--
		}
		e-- // the ':'
		for isJSONSpace(obj[e]) {
			e--
		}
		child := p.child(0, obj[m.Key+1:e])
		if child < 0 {
			continue
		}
		v := obj[m.Val:m.End]
		nd := &p.nodes[child]
		if nd.leaf >= 0 && vals[nd.leaf].Kind == KindMissing {
			vals[nd.leaf] = Value{Raw: v, Kind: kindOf(v[0])}
			if left--; left == 0 {
				return true
			}
		}
		if len(nd.children) > 0 && v[0] == '{' {
			if !p.scan(v, 1, child, vals, &left) {
				return false
			}
			if left == 0 {
				return true
			}
		}
	}
	return true
}
