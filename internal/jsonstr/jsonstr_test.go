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
		in, want         string
		badUTF8, control bool
	}{
		{"plain", "plain", false, false},
		{"q\"b\\", `q\"b\\`, false, false},
		{"l1\nl2\r\t", `l1\nl2\r\t`, false, false},
		{"nul\x00x\x1f", `nul\u0000x\u001f`, false, true},
		{"caf\xe9", `caf\ufffd`, true, false},
		{"ünïcødé ✓", "ünïcødé ✓", false, false},
	} {
		got, bad, ctl := AppendEscaped(nil, []byte(tc.in))
		if string(got) != tc.want || bad != tc.badUTF8 || ctl != tc.control {
			t.Errorf("%q: got %q bad=%v ctl=%v, want %q %v %v", tc.in, got, bad, ctl, tc.want, tc.badUTF8, tc.control)
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
// word that cannot stand for itself in a JSON string (and flag nothing in a plain word).
func TestSpecialBytesFindsTheFirstSpecialByte(t *testing.T) {
	interesting := []byte{0x00, 0x1f, 0x20, 0x21, '"', '\\', 'a', 0x7f, 0x80, 0x9f, 0xa0, 0xc3, 0xff}
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
func escapeByteByByte(s []byte) (out []byte, invalidUTF8, control bool) {
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
		case c < 0x20:
			control = true
			out = append(out, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		case c < utf8.RuneSelf:
			out = append(out, c)
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				out = append(out, `\ufffd`...)
				invalidUTF8 = true
			} else {
				out = append(out, s[i:i+size]...)
			}
			i += size
			continue
		}
		i++
	}
	return out, invalidUTF8, control
}

func checkEscaped(t *testing.T, s []byte) {
	t.Helper()
	got, bad, ctl := AppendEscaped([]byte("prefix"), s)
	want, wantBad, wantCtl := escapeByteByByte(s)
	if !bytes.Equal(got, append([]byte("prefix"), want...)) || bad != wantBad || ctl != wantCtl {
		t.Fatalf("%q: got %q %v %v, want %q %v %v", s, got, bad, ctl, want, wantBad, wantCtl)
	}
}

// Strings long enough for the word loop, with special bytes at every
// offset of a word, against the byte-by-byte reference.
func TestAppendEscapedMatchesByteByByte(t *testing.T) {
	specials := []string{"\"", "\\", "\n", "\x00", "\x1f", "\x7f", "é", "✓", "\xe9", "\xff", "\xc3"}
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
	for _, s := range []string{"", "plain text of some length", "q\"b\\ and more text", "caf\xe9 au lait \x00", "ünïcødé ✓ ok"} {
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
