package jsonstr

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"math/rand/v2"
	"testing"
	"unicode/utf8"
)

func TestAppendEscaped(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		found    Found
	}{
		{"plain", "plain", 0},
		{"q\"b\\", `q\"b\\`, 0},
		{"l1\nl2\r\t", `l1\nl2\r\t`, 0}, // TAB, LF, CR are text
		{"a long line\twith a tab\r\n", `a long line\twith a tab\r\n`, 0}, // also after the word loop
		{"nul\x00x", `nul\u0000x`, NUL},
		{"unit sep\x1f", `unit sep\u001f`, Control},
		{"bell\x07 backspace\b form feed\f vt\v esc\x1b", `bell\u0007 backspace\u0008 form feed\u000c vt\u000b esc\u001b`, Control},
		{"del\x7f", "del\x7f", 0}, // valid in JSON, not reported (see SpecialBytes)
		{"a DEL inside a long word\x7f here", "a DEL inside a long word\x7f here", 0},
		{"nul\x00x\x1f", `nul\u0000x\u001f`, NUL | Control},
		{"caf\xe9", `caf\ufffd`, InvalidUTF8},
		{"caf\xe9\x00\x1b", `caf\ufffd\u0000\u001b`, InvalidUTF8 | NUL | Control},
		{"ünïcødé ✓", "ünïcødé ✓", 0},
		{"C1 \u0085 is a character", "C1 \u0085 is a character", 0}, // only C0 bytes are control bytes
	} {
		got, found := AppendEscaped(nil, []byte(tc.in))
		if string(got) != tc.want || found != tc.found {
			t.Errorf("%q: got %q found=%03b, want %q %03b", tc.in, got, found, tc.want, tc.found)
		}
		if !json.Valid(append(append([]byte{'"'}, got...), '"')) {
			t.Errorf("%q: %q is not a valid JSON string body", tc.in, got)
		}
		if s := AppendEscapedString(nil, tc.in); string(s) != tc.want {
			t.Errorf("AppendEscapedString(%q) = %q", tc.in, s)
		}
	}
	dst := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { dst = AppendEscapedString(dst[:0], "caf\xe9 \"x\"\n") }); n != 0 {
		t.Errorf("%v allocations per call, want 0", n)
	}
}

// SpecialBytes must flag, as its lowest flag, exactly the first byte of a
// word that cannot stand for itself in a JSON string (and flag nothing in a
// plain word).
func TestSpecialBytesFindsTheFirstSpecialByte(t *testing.T) {
	interesting := []byte{0x00, 0x01, 0x1f, 0x20, 0x21, '"', '\\', 'a', 0x7e, 0x7f, 0x80, 0x9f, 0xa0, 0xc3, 0xfe, 0xff}
	rng := rand.New(rand.NewPCG(5, 6))
	var w [8]byte
	for n := 0; n < 200000; n++ {
		for k := range w {
			if rng.IntN(3) == 0 {
				w[k] = interesting[rng.IntN(len(interesting))]
			} else {
				w[k] = byte(0x20 + rng.IntN(0x5f))
			}
		}
		want := 8
		for k, c := range w {
			if c >= 0x80 || c < 0x20 || c == '"' || c == '\\' {
				want = k
				break
			}
		}
		sp := SpecialBytes(binary.LittleEndian.Uint64(w[:]))
		got := 8
		if sp != 0 {
			got = bits.TrailingZeros64(sp) >> 3
		}
		if got != want {
			t.Fatalf("word % x: first special byte at %d, want %d", w, got, want)
		}
	}
}

// escapeByteByByte is AppendEscaped without the word-at-a-time skip: the
// reference the fast path must match byte for byte.
func escapeByteByByte(s []byte) (out []byte, found Found) {
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			out = append(out, '\\', c)
		case c == '\n':
			out = append(out, `\n`...)
		case c == '\r':
			out = append(out, `\r`...)
		case c == '\t':
			out = append(out, `\t`...)
		case c == 0x00:
			found |= NUL
			out = append(out, `\u0000`...)
		case c < 0x20:
			found |= Control
			out = append(out, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		case c < utf8.RuneSelf:
			out = append(out, c)
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				out = append(out, `\ufffd`...)
				found |= InvalidUTF8
			} else {
				out = append(out, s[i:i+size]...)
			}
			i += size
			continue
		}
		i++
	}
	return out, found
}

func checkEscaped(t *testing.T, s []byte) {
	t.Helper()
	got, found := AppendEscaped([]byte("prefix"), s)
	want, wantFound := escapeByteByByte(s)
	if !bytes.Equal(got, append([]byte("prefix"), want...)) || found != wantFound {
		t.Fatalf("%q: got %q %03b, want %q %03b", s, got, found, want, wantFound)
	}
}

// Strings long enough for the word loop, with special bytes at every
// offset of a word, against the byte-by-byte reference.
func TestAppendEscapedMatchesByteByByte(t *testing.T) {
	specials := []string{"\"", "\\", "\n", "\t", "\r", "\x00", "\x01", "\x1f", "\x7f", "é", "✓", "\xe9", "\xff", "\xc3"}
	rng := rand.New(rand.NewPCG(7, 8))
	for n := 0; n < 50000; n++ {
		var b []byte
		for len(b) < rng.IntN(40) {
			if rng.IntN(6) == 0 {
				b = append(b, specials[rng.IntN(len(specials))]...)
			} else {
				b = append(b, byte(0x20+rng.IntN(0x5f)))
			}
		}
		checkEscaped(t, b)
	}
}

func FuzzAppendEscaped(f *testing.F) {
	for _, s := range []string{"", "plain text of some length", "q\"b\\ and more text", "caf\xe9 au lait \x00", "ünïcødé ✓ ok", "ring \x07 del \x7f tab\t"} {
		f.Add([]byte(s))
	}
	f.Fuzz(checkEscaped)
}

func BenchmarkAppendEscaped(b *testing.B) {
	for _, tc := range []struct{ name, s string }{
		{"short", "log message "},
		{"100B", "GET /index.html HTTP/1.1 200 1532 bytes in 3.2ms from 10.0.0.7 user=alice agent=curl/8.5.0 ok"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			dst := make([]byte, 0, 256)
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.s)))
			for b.Loop() {
				dst = AppendEscapedString(dst[:0], tc.s)
			}
		})
	}
}
