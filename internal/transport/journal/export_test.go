package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// refField and refEntry are what refDecode, the reference decoder, finds.
type refField struct {
	name, value       string
	binary, truncated bool
}

type refEntry struct {
	fields    []refField
	size      int
	truncated bool
}

// refDecode decodes the whole of in the simplest way, with the Decoder's
// limits and rules (see Decoder), for FuzzDecode to compare against.
func refDecode(in []byte, maxValue, maxEntry int) ([]refEntry, error) {
	if maxValue <= 0 {
		maxValue = DefaultMaxValue
	}
	if maxEntry <= 0 {
		maxEntry = DefaultMaxEntry
	}
	maxValue = min(maxValue, maxEntry)
	var out []refEntry
	s := 0
	for {
		if s == len(in) {
			return out, io.EOF
		}
		var e refEntry
		p, kept := s, 0
		add := func(f refField, size int) {
			if kept+size > maxEntry {
				e.truncated = true
				return
			}
			kept += size
			e.truncated = e.truncated || f.truncated
			e.fields = append(e.fields, f)
		}
		for {
			nl := bytes.IndexByte(in[p:], '\n')
			if nl >= 0 {
				nl += p
			}
			if nl < 0 && len(in)-p <= MaxName+1+maxValue {
				return out, io.ErrUnexpectedEOF
			}
			if nl == p {
				p++
				break
			}
			lineEnd := nl
			if nl < 0 {
				lineEnd = len(in)
			}
			eq := bytes.IndexByte(in[p:min(lineEnd, p+MaxName+1)], '=')
			switch {
			case eq == 0:
				return out, ErrMalformed
			case eq < 0 && (nl < 0 || nl-p > MaxName):
				return out, ErrMalformed
			case eq > 0:
				name := string(in[p : p+eq])
				val := in[p+eq+1 : lineEnd]
				f := refField{name: name}
				if len(val) > maxValue {
					val, f.truncated = val[:maxValue], true
				}
				f.value = string(val)
				if nl < 0 { // find the line's end
					i := bytes.IndexByte(in[lineEnd:], '\n')
					if i < 0 {
						return out, io.ErrUnexpectedEOF
					}
					nl = lineEnd + i
				}
				add(f, len(name)+len(f.value))
				p = nl + 1
			default:
				name := string(in[p:nl])
				if len(in) < nl+9 {
					return out, io.ErrUnexpectedEOF
				}
				n64 := binary.LittleEndian.Uint64(in[nl+1:])
				if n64 > 1<<40 {
					return out, ErrMalformed
				}
				n := int(n64)
				if len(in)-(nl+9) < n+1 {
					return out, io.ErrUnexpectedEOF
				}
				val := in[nl+9 : nl+9+n]
				f := refField{name: name, binary: true}
				if len(val) > maxValue {
					val, f.truncated = val[:maxValue], true
				}
				f.value = string(val)
				if in[nl+9+n] != '\n' {
					return out, ErrMalformed
				}
				add(f, len(name)+len(f.value))
				p = nl + 9 + n + 1
			}
		}
		e.size = p - s
		out = append(out, e)
		s = p
	}
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), c.n, len(c.b))
	copy(p, c.b[:k])
	c.b = c.b[k:]
	return k, nil
}

// decodeAll runs a Decoder over in, read n bytes at a time.
func decodeAll(in []byte, n, maxValue, maxEntry int) ([]refEntry, error) {
	d := NewDecoder(&chunkReader{b: in, n: n})
	d.MaxValue, d.MaxEntry = maxValue, maxEntry
	var out []refEntry
	for {
		e, err := d.Next()
		if err != nil {
			return out, err
		}
		r := refEntry{size: e.Size, truncated: e.Truncated}
		for _, f := range e.Fields {
			r.fields = append(r.fields, refField{string(f.Name), string(f.Value), f.Binary, f.Truncated})
		}
		out = append(out, r)
	}
}

// exportEntry renders fields (name, value pairs) in the export format,
// choosing the binary form for values that hold a newline, as journalctl
// does (it also does for other bytes it does not print).
func exportEntry(kv ...string) []byte {
	var b []byte
	for i := 0; i+1 < len(kv); i += 2 {
		b = appendExportField(b, kv[i], []byte(kv[i+1]), strings.Contains(kv[i+1], "\n"))
	}
	return append(b, '\n')
}

func appendExportField(b []byte, name string, value []byte, bin bool) []byte {
	b = append(b, name...)
	if !bin {
		b = append(b, '=')
		b = append(b, value...)
		return append(b, '\n')
	}
	b = append(b, '\n')
	b = binary.LittleEndian.AppendUint64(b, uint64(len(value)))
	b = append(b, value...)
	return append(b, '\n')
}

func sameClass(a, b error) bool {
	switch {
	case errors.Is(a, ErrMalformed):
		return errors.Is(b, ErrMalformed)
	case errors.Is(a, io.ErrUnexpectedEOF):
		return errors.Is(b, io.ErrUnexpectedEOF)
	case errors.Is(a, io.EOF):
		return errors.Is(b, io.EOF) && !errors.Is(b, io.ErrUnexpectedEOF)
	}
	return false
}

func checkDecode(t *testing.T, in []byte, chunk, maxValue, maxEntry int) {
	t.Helper()
	want, werr := refDecode(in, maxValue, maxEntry)
	got, gerr := decodeAll(in, chunk, maxValue, maxEntry)
	if !sameClass(werr, gerr) {
		t.Fatalf("chunk %d maxValue %d maxEntry %d: error %v, want %v\ninput %s", chunk, maxValue, maxEntry, gerr, werr, clip(in))
	}
	if g, w := fmt.Sprint(got), fmt.Sprint(want); g != w {
		t.Fatalf("chunk %d maxValue %d maxEntry %d:\ngot  %s\nwant %s\ninput %s", chunk, maxValue, maxEntry, clip([]byte(g)), clip([]byte(w)), clip(in))
	}
}

// clip quotes b, shortened for a failure message.
func clip(b []byte) string {
	if len(b) > 300 {
		return fmt.Sprintf("%q... (%d bytes)", b[:300], len(b))
	}
	return fmt.Sprintf("%q", b)
}

func TestDecode(t *testing.T) {
	two := append(exportEntry("__CURSOR", "s=1;i=1", "MESSAGE", "hello", "PRIORITY", "6"),
		exportEntry("MESSAGE", "line1\nline2", "BIN", "\x00\x01\xff", "EMPTY", "")...)
	cases := []struct {
		name string
		in   []byte
		want string // fmt of the entries, "" to compare with refDecode only
		err  error
	}{
		{"empty", nil, "[]", io.EOF},
		{"two entries", two, "", io.EOF},
		{"binary and multi-line", exportEntry("MESSAGE", "a\nb", "X", "="), "", io.EOF},
		{"value with =", exportEntry("A", "b=c"), "", io.EOF},
		{"cut inside a field", []byte("MESSAGE=hel"), "", io.ErrUnexpectedEOF},
		{"cut before the blank line", []byte("MESSAGE=hello\n"), "", io.ErrUnexpectedEOF},
		{"cut inside a length", []byte("B\n\x03\x00"), "", io.ErrUnexpectedEOF},
		{"no name", []byte("=x\n\n"), "", ErrMalformed},
		{"binary without newline", []byte("B\n\x01\x00\x00\x00\x00\x00\x00\x00xy\n"), "", ErrMalformed},
		{"absurd length", []byte("B\n\xff\xff\xff\xff\xff\xff\xff\xff"), "", ErrMalformed},
		{"long name", append(bytes.Repeat([]byte("N"), MaxName+1), "\n"...), "", ErrMalformed},
		{"blank entry", []byte("\nA=1\n\n"), "", io.EOF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, chunk := range []int{1, 3, 7, 4096, 1 << 20} {
				got, err := decodeAll(c.in, chunk, 0, 0)
				if !sameClass(c.err, err) {
					t.Fatalf("chunk %d: error %v, want %v", chunk, err, c.err)
				}
				if c.want != "" && fmt.Sprint(got) != c.want {
					t.Fatalf("chunk %d: got %v, want %s", chunk, got, c.want)
				}
				checkDecode(t, c.in, chunk, 0, 0)
			}
		})
	}
}

func TestDecodeFields(t *testing.T) {
	in := append(exportEntry("__CURSOR", "s=1;i=1", "MESSAGE", "line1\nline2", "BIN", "\x00\x01\xff"),
		exportEntry("A", "1")...)
	d := NewDecoder(bytes.NewReader(in))
	e, err := d.Next()
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Fields) != 3 || string(e.Fields[1].Value) != "line1\nline2" || !e.Fields[1].Binary ||
		string(e.Fields[2].Value) != "\x00\x01\xff" || e.Fields[0].Binary || e.Size != len(in)-len("A=1\n\n") {
		t.Fatalf("got %+v", e)
	}
	if e, err = d.Next(); err != nil || len(e.Fields) != 1 || string(e.Fields[0].Name) != "A" {
		t.Fatalf("second entry %+v, %v", e, err)
	}
	if _, err = d.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
}

// TestDecodeLimits: long values are cut and flagged, fields past the
// entry budget left out, the next entry read whole, and the buffer stays
// bounded.
func TestDecodeLimits(t *testing.T) {
	big := strings.Repeat("x", 100_000)
	in := append(exportEntry("A", big, "B", "short", "C", big+"\n"+big, "D", "tail"), exportEntry("E", "next")...)
	for _, chunk := range []int{1000, 1 << 20} {
		for _, lim := range [][2]int{{10, 1000}, {50_000, 60_000}, {0, 0}, {200_000, 150_000}} {
			checkDecode(t, in, chunk, lim[0], lim[1])
		}
	}
	d := NewDecoder(bytes.NewReader(in))
	d.MaxValue, d.MaxEntry = 10, 25
	e, err := d.Next()
	if err != nil {
		t.Fatal(err)
	}
	if !e.Truncated || len(e.Fields) != 3 || !e.Fields[0].Truncated || string(e.Fields[0].Value) != "xxxxxxxxxx" ||
		string(e.Fields[1].Value) != "short" || string(e.Fields[2].Name) != "D" {
		t.Fatalf("got %+v", e)
	}
	if e, err = d.Next(); err != nil || string(e.Fields[0].Value) != "next" {
		t.Fatalf("next entry %+v %v", e, err)
	}
	// A value of 100 MB kept to 1 KiB: the buffer does not hold it.
	huge := &patternReader{head: []byte("MESSAGE="), n: 100 << 20, tail: []byte("\n\nA=1\n\n")}
	d = NewDecoder(huge)
	d.MaxValue, d.MaxEntry = 1024, 4096
	if e, err = d.Next(); err != nil || !e.Truncated || len(e.Fields[0].Value) != 1024 || e.Size != 8+100<<20+2 {
		t.Fatalf("huge entry: %v %v", e, err)
	}
	if len(d.buf) > 1<<20 {
		t.Fatalf("buffer grew to %d bytes for a value kept to 1 KiB", len(d.buf))
	}
	if e, err = d.Next(); err != nil || string(e.Fields[0].Value) != "1" {
		t.Fatalf("after the huge entry: %v %v", e, err)
	}
}

// A buffer grown for one large entry is given back once giveBackAfter
// small entries followed it, and not while large ones keep coming.
func TestDecoderGivesBackItsBuffer(t *testing.T) {
	var in []byte
	const large = giveBackAfter + 6
	for range large {
		in = append(in, exportEntry("MESSAGE", strings.Repeat("y", 100_000))...)
	}
	for i := range 3 * giveBackAfter {
		in = append(in, exportEntry("MESSAGE", "small "+strconv.Itoa(i))...)
	}
	d := NewDecoder(bytes.NewReader(in))
	d.MaxValue, d.MaxEntry = 1<<20, 1<<20
	var grown *byte // the buffer once grown for a large entry
	for i := range large + 3*giveBackAfter {
		e, err := d.Next()
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		want := "small " + strconv.Itoa(i-large)
		if i < large {
			want = strings.Repeat("y", 100_000)
		}
		if got := string(e.Fields[0].Value); got != want {
			t.Fatalf("entry %d: %.20q, want %.20q", i, got, want)
		}
		switch {
		case i == 1:
			grown = unsafe.SliceData(d.buf)
			if d.Held() < 100_000 {
				t.Fatalf("buffer %d bytes after a 100 KB entry", d.Held())
			}
		case i > 1 && i < large && unsafe.SliceData(d.buf) != grown:
			t.Fatalf("entry %d: a new buffer, want the one grown for the first (no allocation per large entry)", i)
		}
	}
	// The next look for input (here the end of it; in the daemon, a read
	// that waits for journalctl) finds the buffer oversized.
	if _, err := d.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last entry: %v", err)
	}
	if h := d.Held(); h != readSize {
		t.Fatalf("buffer %d bytes after %d small entries, want it given back (%d)", h, 3*giveBackAfter, readSize)
	}
}

// patternReader yields head, n bytes of 'x', then tail.
type patternReader struct {
	head []byte
	n    int
	tail []byte
}

func (r *patternReader) Read(p []byte) (int, error) {
	switch {
	case len(r.head) > 0:
		k := copy(p, r.head)
		r.head = r.head[k:]
		return k, nil
	case r.n > 0:
		k := min(len(p), r.n)
		for i := range p[:k] {
			p[i] = 'x'
		}
		r.n -= k
		return k, nil
	case len(r.tail) > 0:
		k := copy(p, r.tail)
		r.tail = r.tail[k:]
		return k, nil
	}
	return 0, io.EOF
}

// FuzzDecode compares the streaming Decoder, read in chunks of any size
// and with any limits, with refDecode on the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(exportEntry("__CURSOR", "s=1;i=1", "MESSAGE", "hello", "PRIORITY", "6"), uint16(0), uint16(0), uint8(7))
	f.Add(exportEntry("MESSAGE", "line1\nline2", "BIN", "\x00\x01\xff", "EMPTY", ""), uint16(3), uint16(20), uint8(1))
	f.Add([]byte("A=1\n\nB\n\x02\x00\x00\x00\x00\x00\x00\x00xy\n\n"), uint16(1), uint16(2), uint8(2))
	f.Add([]byte("=x\n\n"), uint16(0), uint16(0), uint8(0))
	f.Fuzz(func(t *testing.T, in []byte, maxValue, maxEntry uint16, chunk uint8) {
		checkDecode(t, in, 1+int(chunk), int(maxValue), int(maxEntry))
	})
}
