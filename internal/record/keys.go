package record

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/ipclab/logagg/internal/jsonstr"
)

// Top-level keys: the reserved key and repeated names.
//
// Our own "agg" is the only member the aggregator adds, so a producer's
// top-level "agg" (however spelled: "\u0061gg" decodes to the same name) is
// renamed to "producer_agg" in the output and flagged reserved_key; its
// value is copied verbatim. A top-level member name that occurs twice, after
// unescaping and after that rename, is flagged duplicate_key and the record
// is kept verbatim: consumers disagree about which of two members wins, so
// they are told. Only the top level is checked, because that is where
// consumers index fields; checking nested objects would cost per nested key.
//
// The check must cost nothing measurable for ordinary records and stay
// linear for records with hundreds of members. Producers repeat a few key
// sequences (one per call site) record after record, so the Encoder keeps
// a keyDict: the names of up to dictKeys recent plain (unescaped) keys,
// each with a small ID, and for each ID the ID of the key that followed it
// last time. A key is first compared with that predicted successor: two
// masked word compares, cheaper than the string scan they replace, since a
// key equal to a remembered one is valid. A key not predicted is scanned
// (for a short ASCII key, the words of that scan are its dictionary entry)
// and looked up by its first sixteen bytes and length, and added if new.
// Keys with IDs are distinct exactly when their IDs are, so the duplicate
// test is a bit in a 64-bit mask. docs/adr/ has the measurements.
//
// What gets no ID is checked once the object is known to be valid, with a
// seeded hash of the whole name (hash/maphash) in a table the Encoder keeps
// (dupAmong), so thousands of members, even with names crafted to collide,
// cost linear time and, once the table has grown, no allocation:
//
//   - plain keys that found the dictionary full, and keys longer than
//     maxDictKey ("loose" keys), are checked among themselves: not being in
//     the dictionary, they differ from every key that has an ID. A record
//     with more members than the dictionary holds repeats its loose keys
//     too; looseMemo remembers them, and when they come again in the same
//     order they are compared as predicted keys are and not hashed;
//   - a key with escapes, or one that decodes to "agg", makes every key of
//     the record be checked (they are rare, and their output names may
//     equal any other key's).

// dictKeys is how many key names a keyDict holds: IDs are bits of a word.
// maxDictKey bounds the size of a name in it (with its closing quote), so
// that the dictionary stays small whatever producers send.
const (
	dictKeys   = 64
	maxDictKey = 64
)

// topKeys is an Encoder's state for the top-level keys: the dictionary,
// which lives from record to record, and scratch that each scan resets.
type topKeys struct {
	dict keyDict

	flags    Flags // FlagReservedKey so far; FlagDuplicateKey once found
	aggs     []int // opening quotes of the keys that decode to "agg"
	loose    []int // plain keys without an ID: the opening quote and end of each
	fallback bool  // a key has escapes or is "agg": check all keys at the end
	known    int   // how many of the loose keys are the ones of looseMemo, in order

	looseMemo looseMemo

	index MemberIndex // where the top-level members are

	quotes []int    // scratch: opening quotes of the keys dupAmong checks
	tab    []uint32 // dupAmong's hash table: index+1 into hash, 0 empty
	hash   []uint64 // dupAmong's hash of each key
}

func (tk *topKeys) reset() {
	tk.flags = 0
	tk.aggs = tk.aggs[:0]
	tk.loose = tk.loose[:0]
	tk.fallback = false
	tk.known = 0
	if cap(tk.quotes) > maxKeepKeys || cap(tk.loose) > 2*maxKeepKeys || cap(tk.aggs) > maxKeepKeys || cap(tk.hash) > maxKeepKeys {
		// grown for a rare huge record
		tk.quotes, tk.loose, tk.aggs, tk.tab, tk.hash = nil, nil, nil, nil, nil
	}
}

// keyDict remembers recent plain key names. IDs are never reused until
// reset, which happens only between records.
type keyDict struct {
	n     int
	gen   uint64 // counts changes: adds and resets
	keys  [dictKeys]dictKey
	index [2 * dictKeys]uint8 // open addressing from dictSlot: ID+1, 0 empty
	// next[0] is ID+1 of the first key of the last record, next[id+1] that
	// of the key after key id, next[dictKeys+1] that of the key after one
	// without an ID; 0 is none.
	next [2 * dictKeys]uint8 // (indexes up to dictKeys+1 used)
	text []byte              // the names, each followed by its closing quote
}

// dictKey is a remembered name followed by its closing quote (size bytes,
// at text[off:]); the first sixteen of those bytes also as two
// little-endian words, zero-padded, with masks of the bytes that count.
type dictKey struct {
	lo, hi   uint64
	mlo, mhi uint64
	size     int
	off      int
	_        [2]uint64 // 64 bytes: the index is a shift
}

const (
	dictIndexBits = 7 // log2(len(keyDict.index))
	afterUnknown  = dictKeys + 1
)

func (d *keyDict) reset() {
	d.n = 0
	d.gen++
	d.index = [len(d.index)]uint8{}
	d.next = [len(d.next)]uint8{}
	d.text = d.text[:0]
}

// matchText reports whether the key whose opening quote is b[q] is dk,
// whose bytes are at text[dk.off:]: from byte from on (the first sixteen
// are compared as words when they are in b).
func matchText(b []byte, q int, dk *dictKey, text []byte, from int) bool {
	end := q + 1 + dk.size
	return end <= len(b) && string(b[q+1+from:end]) == string(text[dk.off+from:dk.off+dk.size])
}

// newDictKey is the entry of key (a name and its closing quote) whose
// bytes will be at off.
func newDictKey(key []byte, off int) dictKey {
	var w [16]byte
	copy(w[:], key)
	mlo, mhi := byteMask(len(key)), byteMask(len(key)-8)
	return dictKey{
		lo: binary.LittleEndian.Uint64(w[:]) & mlo, hi: binary.LittleEndian.Uint64(w[8:]) & mhi,
		mlo: mlo, mhi: mhi, size: len(key), off: off,
	}
}

// dictSlot is where in keyDict.index a search for a key whose first sixteen
// bytes (with the closing quote, masked) are lo and hi starts. Longer keys
// that share them share the slot; the dictionary is small, so that bounds
// the probes.
func dictSlot(lo, hi uint64, size int) uint64 {
	return ((lo ^ bits.RotateLeft64(hi, 32) + uint64(size)) * 0x9e3779b97f4a7c15) >> (64 - dictIndexBits)
}

// find returns the ID of key (a plain name and its closing quote, the first
// sixteen bytes lo and hi), or -1.
func (d *keyDict) find(key []byte, lo, hi uint64) int {
	for x := dictSlot(lo, hi, len(key)); ; x = (x + 1) & (2*dictKeys - 1) {
		e := d.index[x]
		if e == 0 {
			return -1
		}
		dk := &d.keys[(e-1)&(dictKeys-1)]
		if dk.lo == lo && dk.hi == hi && dk.size == len(key) &&
			(len(key) <= 16 || string(d.text[dk.off+16:dk.off+dk.size]) == string(key[16:])) {
			return int(e - 1)
		}
	}
}

// add remembers key (a plain name and its closing quote, the first sixteen
// bytes lo and hi) and returns its ID, or -1 if the dictionary is full.
func (d *keyDict) add(key []byte, lo, hi uint64) int {
	if d.n == dictKeys {
		return -1
	}
	id := d.n
	d.n++
	d.gen++
	d.keys[id] = newDictKey(key, len(d.text))
	d.text = append(d.text, key...)
	x := dictSlot(lo, hi, len(key))
	for d.index[x] != 0 {
		x = (x + 1) & (2*dictKeys - 1)
	}
	d.index[x] = uint8(id + 1)
	return id
}

// byteMask is the mask of the low n bytes of a word (n clamped to 0..8).
func byteMask(n int) uint64 {
	return ^uint64(0) >> uint(64-8*min(max(n, 0), 8))
}

// aggWord is the first word of a key "agg": the name and its closing quote.
const aggWord = 'a' | 'g'<<8 | 'g'<<16 | '"'<<24

// newKey scans the top-level key whose opening quote is b[q] when the
// dictionary did not predict it, and returns the index after its closing
// quote and its ID (-1 if it gets none).
//
// A key that is the next one of looseMemo is taken as it is. A plain ASCII
// key of up to fifteen bytes, at least seventeen bytes from the end of b,
// is scanned here with the word test of scanString on one or two words,
// which are then also its dictionary entry. Everything else goes through
// scanString and oddKey.
func (tk *topKeys) newKey(b []byte, q int) (end, id int, ok bool) {
	if m := &tk.looseMemo; tk.known == len(tk.loose)/2 && tk.known < len(m.keys) && m.gen == tk.dict.gen {
		if end = m.match(b, q, tk.known); end != 0 {
			tk.loose = append(tk.loose, q, end)
			tk.known++
			return end, -1, true
		}
	}
	if q+17 <= len(b) {
		var lo, hi uint64
		size := 0 // of the name and its closing quote
		w := binary.LittleEndian.Uint64(b[q+1 : q+9])
		if m := jsonstr.SpecialBytes(w); m != 0 {
			if p := bits.TrailingZeros64(m) >> 3; b[q+1+p] == '"' {
				size = p + 1
				lo = w & byteMask(size)
			}
		} else {
			w2 := binary.LittleEndian.Uint64(b[q+9 : q+17])
			if m := jsonstr.SpecialBytes(w2); m != 0 {
				if p := bits.TrailingZeros64(m) >> 3; b[q+9+p] == '"' {
					size = 9 + p
					lo, hi = w, w2&byteMask(p+1)
				}
			}
		}
		if size != 0 && !(size == 4 && lo == aggWord) {
			end = q + 1 + size
			d := &tk.dict
			if id = d.find(b[q+1:end], lo, hi); id < 0 {
				if d.n == dictKeys {
					tk.loose = append(tk.loose, q, end)
				} else {
					id = d.add(b[q+1:end], lo, hi)
				}
			}
			return end, id, true
		}
	}
	end, esc, ok := scanString(b, q+1)
	if !ok {
		return 0, -1, false
	}
	return end, tk.oddKey(b, q, end, esc), true
}

// oddKey is newKey for a key with escapes, one that is "agg", one longer
// than fifteen bytes or not ASCII, and one too close to the end of b for
// word loads. A key that decodes to "agg" is listed in tk.aggs and
// flagged; one longer than maxDictKey is loose.
func (tk *topKeys) oddKey(b []byte, q, end int, esc bool) int {
	raw := b[q+1 : end-1]
	if esc || string(raw) == "agg" {
		if keyIsAgg(raw, esc) {
			tk.flags |= FlagReservedKey
			tk.aggs = append(tk.aggs, q)
		}
		tk.fallback = true
		return -1
	}
	key := b[q+1 : end] // with the closing quote
	if len(key) > maxDictKey {
		tk.loose = append(tk.loose, q, end)
		return -1
	}
	e := newDictKey(key, 0)
	id := tk.dict.find(key, e.lo, e.hi)
	if id < 0 {
		if id = tk.dict.add(key, e.lo, e.hi); id < 0 {
			tk.loose = append(tk.loose, q, end)
		}
	}
	return id
}

// looseMemo remembers the loose keys of the last record that had loose
// keys and no repeated name among them, when it was scanned with the
// dictionary at generation gen. A record with many members (more than the
// dictionary holds) sends the same loose keys each time: while the
// dictionary is unchanged, a key equal to the next remembered one is
// known valid, loose (not in the dictionary) and distinct from the
// remembered keys before it, so it needs neither a lookup nor the hashed
// check at the end.
type looseMemo struct {
	gen  uint64
	keys []dictKey // off is into text
	text []byte
}

// match returns the index just past the closing quote of the key whose
// opening quote is b[q] if it is the k-th remembered one, else 0.
func (m *looseMemo) match(b []byte, q, k int) int {
	mk := &m.keys[k]
	if q+17 <= len(b) {
		if (load64(b, q+1)&mk.mlo^mk.lo)|(load64(b, q+9)&mk.mhi^mk.hi) != 0 ||
			mk.size > 16 && !matchText(b, q, mk, m.text, 16) {
			return 0
		}
	} else if !matchText(b, q, mk, m.text, 0) {
		return 0
	}
	return q + 1 + mk.size
}

// set remembers the keys given by spans (opening quote and end).
func (m *looseMemo) set(b []byte, spans []int, gen uint64) {
	m.text, m.keys = m.text[:0], m.keys[:0]
	for k := 0; k < len(spans); k += 2 {
		key := b[spans[k]+1 : spans[k+1]]
		m.keys = append(m.keys, newDictKey(key, len(m.text)))
		m.text = append(m.text, key...)
	}
	m.gen = gen
	if cap(m.keys) > maxKeepKeys || cap(m.text) > 64*maxKeepKeys {
		m.text, m.keys = nil, nil // grown for a rare huge record
	}
}

// finish completes the checks of a valid object of n members and returns
// its flags. It also resets a full dictionary that left keys of a record
// without IDs although the record would have fitted: the set of names in
// use has moved on.
func (tk *topKeys) finish(b []byte, n int) Flags {
	f := tk.flags
	switch {
	case f&FlagDuplicateKey != 0:
	case tk.fallback:
		tk.quotes = appendKeyQuotes(tk.quotes[:0], b)
		if tk.dupAmong(b, tk.quotes) {
			f |= FlagDuplicateKey
		}
	case tk.known == len(tk.loose)/2:
		// No loose keys, or the ones of the memo, in its order: distinct
		// from each other and, the dictionary being unchanged, from the
		// keys with IDs.
	case tk.dupAmongPlain(b, tk.loose):
		f |= FlagDuplicateKey
	default:
		tk.looseMemo.set(b, tk.loose, tk.dict.gen)
	}
	if len(tk.loose) > 0 && n <= dictKeys/2 {
		tk.dict.reset()
	}
	return f
}

var producerAgg = []byte("producer_agg")

// appendKeyQuotes appends the indexes of the opening quotes of the
// top-level keys of the valid object b. (It stops at anything unexpected
// rather than trust that b is valid.)
func appendKeyQuotes(dst []int, b []byte) []int {
	var info objInfo // skipSpace's line-break note, not needed here
	var ok bool
	i := skipSpace(b, 1, &info)
	for i < len(b) && b[i] == '"' {
		dst = append(dst, i)
		if i, _, ok = scanString(b, i+1); !ok {
			break
		}
		if i = skipSpace(b, i, &info); i >= len(b) || b[i] != ':' {
			break
		}
		if i = skipSpace(b, i+1, &info); i >= len(b) {
			break
		}
		switch b[i] {
		case '"':
			i, _, ok = scanString(b, i+1)
		case '{', '[':
			var sub objInfo
			sub, ok = scanNested(b[i:], maxDepth, nil)
			i += sub.end
		default:
			i, ok = skipScalar(b, i)
		}
		if !ok {
			break
		}
		if i = skipSpace(b, i, &info); i >= len(b) || b[i] != ',' {
			break
		}
		i = skipSpace(b, i+1, &info)
	}
	return dst
}

// skipScalar returns the index after the number or literal at b[i].
func skipScalar(b []byte, i int) (int, bool) {
	switch {
	case hasLiteral(b[i:], "true"), hasLiteral(b[i:], "null"):
		return i + 4, true
	case hasLiteral(b[i:], "false"):
		return i + 5, true
	}
	return scanNumber(b, i)
}

// nextRune decodes the rune at raw[i] of a validated string's contents and
// returns it with the index after it. Escapes (when esc) are decoded as
// encoding/json decodes them: a surrogate pair is one rune, and a lone
// surrogate becomes U+FFFD.
func nextRune(raw []byte, i int, esc bool) (rune, int) {
	c := raw[i]
	if c < utf8.RuneSelf && (c != '\\' || !esc) {
		return rune(c), i + 1
	}
	if c != '\\' {
		r, size := utf8.DecodeRune(raw[i:])
		return r, i + size
	}
	switch raw[i+1] {
	case 'u':
		r := hex4(raw[i+2:])
		i += 6
		if utf16.IsSurrogate(r) {
			if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
				if d := utf16.DecodeRune(r, hex4(raw[i+2:])); d != utf8.RuneError {
					return d, i + 6
				}
			}
			return utf8.RuneError, i
		}
		return r, i
	case 'b':
		return '\b', i + 2
	case 'f':
		return '\f', i + 2
	case 'n':
		return '\n', i + 2
	case 'r':
		return '\r', i + 2
	case 't':
		return '\t', i + 2
	default: // '"', '\\', '/'
		return rune(raw[i+1]), i + 2
	}
}

func hex4(b []byte) rune {
	return hexVal(b[0])<<12 | hexVal(b[1])<<8 | hexVal(b[2])<<4 | hexVal(b[3])
}

// keyName returns the raw contents of the validated key whose opening quote
// is b[q] and whether they hold escapes. A key that decodes to "agg" is
// returned as producer_agg, the name it has in the output.
func keyName(b []byte, q int) ([]byte, bool) {
	end, esc, _ := scanString(b, q+1)
	raw := b[q+1 : end-1]
	if keyIsAgg(raw, esc) {
		return producerAgg, false
	}
	return raw, esc
}

// sameKey reports whether the keys whose opening quotes are b[q1] and
// b[q2] have the same output name.
func sameKey(b []byte, q1, q2 int) bool {
	x, xEsc := keyName(b, q1)
	y, yEsc := keyName(b, q2)
	if !xEsc && !yEsc {
		return string(x) == string(y)
	}
	i, j := 0, 0
	for i < len(x) && j < len(y) {
		var rx, ry rune
		rx, i = nextRune(x, i, xEsc)
		ry, j = nextRune(y, j, yEsc)
		if rx != ry {
			return false
		}
	}
	return i == len(x) && j == len(y)
}

// keySeed seeds the hash of dupAmong, so that names crafted to collide
// cannot make the check quadratic.
var keySeed = maphash.MakeSeed()

// keyHash hashes the output name of the key whose opening quote is b[q].
func keyHash(b []byte, q int) uint64 {
	raw, esc := keyName(b, q)
	if !esc {
		return maphash.Bytes(keySeed, raw)
	}
	var h maphash.Hash
	h.SetSeed(keySeed)
	var buf [utf8.UTFMax]byte
	for i := 0; i < len(raw); {
		var r rune
		r, i = nextRune(raw, i, true)
		h.Write(utf8.AppendRune(buf[:0], r))
	}
	return h.Sum64()
}

// maxKeepKeys bounds the scratch an Encoder keeps between records (in
// keys); bigger scratch, grown for a rare huge record, is dropped.
const maxKeepKeys = 1 << 14

// dupAmong reports whether two of the keys of b whose opening quotes are
// quotes have the same output name.
func (tk *topKeys) dupAmong(b []byte, quotes []int) bool {
	n := len(quotes)
	if n < 2 {
		return false
	}
	mask := tk.table(n)
	for k, q := range quotes {
		h := keyHash(b, q)
		tk.hash[k] = h
		for x := h & mask; ; x = (x + 1) & mask {
			e := tk.tab[x]
			if e == 0 {
				tk.tab[x] = uint32(k + 1)
				break
			}
			if tk.hash[e-1] == h && sameKey(b, quotes[e-1], q) {
				return true
			}
		}
	}
	return false
}

// dupAmongPlain reports whether two of the keys of b without escapes
// given in spans, as pairs of their opening quote and end, are equal.
func (tk *topKeys) dupAmongPlain(b []byte, spans []int) bool {
	n := len(spans) / 2
	if n < 2 {
		return false
	}
	mask := tk.table(n)
	for k := range n {
		name := b[spans[2*k]+1 : spans[2*k+1]-1]
		h := maphash.Bytes(keySeed, name)
		tk.hash[k] = h
		for x := h & mask; ; x = (x + 1) & mask {
			e := int(tk.tab[x])
			if e == 0 {
				tk.tab[x] = uint32(k + 1)
				break
			}
			if tk.hash[e-1] == h && string(b[spans[2*e-2]+1:spans[2*e-1]-1]) == string(name) {
				return true
			}
		}
	}
	return false
}

// table readies the scratch of dupAmong for n keys, at most half full, and
// returns the mask of its slots.
func (tk *topKeys) table(n int) uint64 {
	size := 1 << bits.Len(uint(2*n-1))
	if cap(tk.tab) < size {
		tk.tab = make([]uint32, size)
	} else {
		tk.tab = tk.tab[:size]
		clear(tk.tab)
	}
	if cap(tk.hash) < n {
		tk.hash = make([]uint64, n)
	}
	tk.hash = tk.hash[:n]
	return uint64(size - 1)
}
