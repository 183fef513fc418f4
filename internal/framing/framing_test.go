package framing

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/ipclab/logagg/internal/record"
)

type rec struct {
	msg   string
	flags string // record.Flags names joined by ","
}

func flagString(f record.Flags) string { return strings.Join(f.Names(), ",") }

// frameAll feeds in to a fresh Stream in chunks of chunk bytes (0 = all at
// once), as a reader with an unbounded buffer would, and returns the
// records and the number of framing bytes (consumed but not payload).
func frameAll(t testing.TB, in string, maxRecord int, octet bool, chunk int) ([]rec, int) {
	t.Helper()
	s := Stream{MaxRecord: maxRecord, Octet: octet}
	var out []rec
	var buf []byte
	framing := 0
	src := []byte(in)
	for {
		eof := len(src) == 0
		if !eof {
			k := len(src)
			if chunk > 0 {
				k = min(chunk, k)
			}
			buf, src = append(buf, src[:k]...), src[k:]
		}
		for {
			n, payload, flags, emit := s.Next(buf, eof)
			if n == 0 {
				break
			}
			if emit {
				if maxRecord > 0 && len(payload) > maxRecord {
					t.Fatalf("payload of %d bytes over max %d", len(payload), maxRecord)
				}
				out = append(out, rec{string(payload), flagString(flags)})
				framing += n - len(payload)
			} else {
				framing += n
			}
			buf = buf[n:]
		}
		if eof {
			if len(buf) != 0 {
				t.Fatalf("%d bytes left unconsumed at eof: %q", len(buf), buf)
			}
			return out, framing
		}
	}
}

func TestStream(t *testing.T) {
	long := strings.Repeat("L", 150_000)
	tests := []struct {
		name      string
		in        string
		octet     bool
		maxRecord int
		want      []rec
	}{
		{"lines", "a\nb\n", false, 64, []rec{{"a", ""}, {"b", ""}}},
		{"empty lines skipped, partial tail", "a\n\n\nb", false, 64, []rec{{"a", ""}, {"b", "partial"}}},
		{"octet frames back to back", "5 <1>ab3 <2>", true, 64, []rec{{"<1>ab", ""}, {"<2>", ""}}},
		{"octet frames with newline between", "5 <1>ab\n3 <2>\n", true, 64, []rec{{"<1>ab", ""}, {"<2>", ""}}},
		{"octet counted newline stripped", "4 <1>\nx\n", true, 64, []rec{{"<1>", ""}, {"x", ""}}},
		{"octet frame may hold newlines and NULs", "9 <1>a\nb\x00c\nnext\n", true, 64, []rec{{"<1>a\nb\x00c", ""}, {"next", ""}}},
		{"octet off keeps count", "5 <1>ab\n", false, 64, []rec{{"5 <1>ab", ""}}},
		{"digits without < are a line", "200 OK\n", true, 64, []rec{{"200 OK", ""}}},
		{"ten digits are a line", "1234567890 <x\n", true, 64, []rec{{"1234567890 <x", ""}}},
		{"count zero is framing error", "0 <1>x\nok\n", true, 64, []rec{{"0 <1>x", "framing"}, {"ok", ""}}},
		{"leading zero is framing error", "05 <1>ab\n", true, 64, []rec{{"05 <1>ab", "framing"}}},
		{"line of exactly max", "01234567\nz\n", false, 8, []rec{{"01234567", ""}, {"z", ""}}},
		{"long line split", "0123456789abc\nnext\n", false, 8, []rec{{"01234567", "truncated"}, {"89abc", "continuation"}, {"next", ""}}},
		{"long line split three ways", "0123456789abcdefXY\n", false, 8, []rec{{"01234567", "truncated"}, {"89abcdef", "truncated,continuation"}, {"XY", "continuation"}}},
		{"long line at eof", "0123456789", false, 8, []rec{{"01234567", "truncated"}, {"89", "partial,continuation"}}},
		{"octet over max split", "12 <1>456789abcnext\n", true, 8, []rec{{"<1>45678", "truncated"}, {"9abc", "continuation"}, {"next", ""}}},
		{"octet over max split, last piece newline", "12 <1>456789ab\nnext\n", true, 8, []rec{{"<1>45678", "truncated"}, {"9ab", "continuation"}, {"next", ""}}},
		{"octet incomplete at eof", "10 <1>ab", true, 64, []rec{{"<1>ab", "partial"}}},
		{"header incomplete at eof", "12", true, 64, []rec{{"12", "partial"}}},
		{"long line kept whole under max", long + "\nz\n", false, 200_000, []rec{{long, ""}, {"z", ""}}},
		{"very long line split", long + "\nz\n", false, 100_000, []rec{{long[:100_000], "truncated"}, {long[100_000:], "continuation"}, {"z", ""}}},

		// NUL framing (Python's SysLogHandler over TCP and unix stream).
		{"NUL frames", "<14>a\x00<14>b\x00", false, 64, []rec{{"<14>a", ""}, {"<14>b", ""}}},
		{"NUL framing keeps later newlines", "<14>a\x00<14>b\nc\x00<14>d\x00", false, 64, []rec{{"<14>a", ""}, {"<14>b\nc", ""}, {"<14>d", ""}}},
		{"NUL framing: partial at eof", "<14>a\x00<14>b\nc", false, 64, []rec{{"<14>a", ""}, {"<14>b\nc", "partial"}}},
		{"NUL then newline after each frame", "a\x00\nb\nc\x00\r\n", false, 64, []rec{{"a", ""}, {"b\nc", ""}}},
		{"NUL framing trailing newline trimmed", "a\x00b\n\x00", false, 64, []rec{{"a", ""}, {"b", ""}}},
		{"octet frames do not decide", "5 <1>ab\x00<2>c\nd\x003 <3>", true, 64, []rec{{"<1>ab", ""}, {"<2>c", ""}, {"d", ""}, {"<3>", ""}}},
		{"NUL framing with octet frames", "<0>z\x005 <1>ab<2>c\nd\x003 <3>", true, 64, []rec{{"<0>z", ""}, {"<1>ab", ""}, {"<2>c\nd", ""}, {"<3>", ""}}},
		{"newline first: a NUL still ends a frame", "a\nb\x00c\nd\n", false, 64, []rec{{"a", ""}, {"b", ""}, {"c", ""}, {"d", ""}}},
		{"NUL framing, long frame split at max", "abc\x000123456789\nX\x00", false, 8, []rec{{"abc", ""}, {"01234567", "truncated"}, {"89\nX", "continuation"}}},
		{"empty NUL frames skipped", "\x00\x00a\x00\x00b\x00", false, 64, []rec{{"a", ""}, {"b", ""}}},
		{"leading NULs do not decide", "\x00a\nb\x00c\nd\n", false, 64, []rec{{"a", ""}, {"b", ""}, {"c", ""}, {"d", ""}}},
	}
	for _, tc := range tests {
		for _, chunk := range []int{0, 1, 3} {
			if chunk == 1 && len(tc.in) > 10_000 {
				continue
			}
			got, _ := frameAll(t, tc.in, tc.maxRecord, tc.octet, chunk)
			if !slices.Equal(got, tc.want) {
				t.Errorf("%s (chunk %d):\n got %q\nwant %q", tc.name, chunk, got, tc.want)
			}
		}
	}
}

func TestForce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		held   string // the incomplete frame forced out
		rest   string // what arrives afterwards
		octet  bool
		forced rec
		want   []rec
	}{
		{"delimited", "abc", "def\nnext\n", false, rec{"abc", "truncated"}, []rec{{"def", "continuation"}, {"next", ""}}},
		{"delimiter right after", "abc", "\nnext\n", false, rec{"abc", "truncated"}, []rec{{"next", ""}}},
		{"octet frame", "9 <1>ab", "cdef10 <2>abcdef", true, rec{"<1>ab", "truncated"}, []rec{{"cdef", "continuation"}, {"<2>abcdef", "partial"}}},
	} {
		s := Stream{MaxRecord: 64, Octet: tc.octet}
		if n, _, _, _ := s.Next([]byte(tc.held), false); n != 0 {
			t.Fatalf("%s: %q is not incomplete", tc.name, tc.held)
		}
		p, f := s.Force([]byte(tc.held))
		if got := (rec{string(p), flagString(f)}); got != tc.forced {
			t.Errorf("%s: forced %q, want %q", tc.name, got, tc.forced)
		}
		var got []rec
		buf := []byte(tc.rest)
		for {
			n, payload, flags, emit := s.Next(buf, true)
			if n == 0 {
				break
			}
			if emit {
				got = append(got, rec{string(payload), flagString(flags)})
			}
			buf = buf[n:]
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: then %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestStreamNULFraming(t *testing.T) {
	var s Stream
	if s.NULFraming() {
		t.Fatal("fresh stream frames with NUL")
	}
	s.Next([]byte("a\x00"), false)
	if !s.NULFraming() {
		t.Fatal("a first frame ended by NUL did not switch to NUL framing")
	}
	s.Reset()
	s.Next([]byte("a\nb\x00"), false)
	if s.NULFraming() {
		t.Fatal("a first frame ended by newline switched to NUL framing")
	}
}

func TestMessage(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		maxRecord int
		want      []rec
	}{
		{"one record", "<14>a", 0, []rec{{"<14>a", ""}}},
		{"newlines stay", "<14>a\nb\nc", 0, []rec{{"<14>a\nb\nc", ""}}},
		{"trailing newline removed", "<14>a\n", 0, []rec{{"<14>a", ""}}},
		{"trailing NUL removed", "<14>a\x00", 0, []rec{{"<14>a", ""}}},
		{"trailing newline then NUL removed", "<14>a\n\x00", 0, []rec{{"<14>a", ""}}},
		{"only one newline removed", "a\n\n", 0, []rec{{"a\n", ""}}},
		{"pretty JSON is one record", "{\n \"a\": 1\n}\n", 0, []rec{{"{\n \"a\": 1\n}", ""}}},
		{"empty", "", 0, nil},
		{"just a newline", "\n", 0, nil},
		{"RFC 7464 sequence", "\x1e{\"a\":1}\n\x1e{\"b\":2}\n", 0, []rec{{`{"a":1}`, ""}, {`{"b":2}`, ""}}},
		{"RFC 7464 without newlines, empty records skipped", "\x1ea\x1e\x1e\n\x1eb", 0, []rec{{"a", ""}, {"b", ""}}},
		{"RS in the middle is data", "a\x1eb", 0, []rec{{"a\x1eb", ""}}},
		{"long message split", "0123456789", 4, []rec{{"0123", "truncated"}, {"4567", "truncated,continuation"}, {"89", "continuation"}}},
		{"long record in sequence split", "\x1e012345\n\x1eab\n", 4, []rec{{"0123", "truncated"}, {"45", "continuation"}, {"ab", ""}}},
		// srslog's RFC5425MessageLengthFramer on a datagram: the count
		// covers its newline.
		{"octet count of the whole rest removed", "12 <14>a b c d\n", 0, []rec{{"<14>a b c d", ""}}},
		{"octet count without a newline", "5 <14>a", 0, []rec{{"<14>a", ""}}},
		{"octet count too small kept", "4 <14>ab", 0, []rec{{"4 <14>ab", ""}}},
		{"octet count too large kept", "9 <14>ab", 0, []rec{{"9 <14>ab", ""}}},
		{"a number before something else kept", "6 apples", 0, []rec{{"6 apples", ""}}},
		{"octet count with a leading zero kept", "05 <14>a", 0, []rec{{"05 <14>a", ""}}},
	}
	for _, tc := range tests {
		var got []rec
		Message([]byte(tc.in), tc.maxRecord, false, func(b []byte, f record.Flags) { got = append(got, rec{string(b), flagString(f)}) })
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

func TestMessageCut(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []rec
	}{
		{"<14>abc\n", []rec{{"<14>abc\n", "truncated"}}},
		{"9 <14>abc", []rec{{"9 <14>abc", "truncated"}}}, // the count is not checked against a cut message
		{"\x1ea\n\x1ebc", []rec{{"a", ""}, {"bc", "truncated"}}},
	} {
		var got []rec
		Message([]byte(tc.in), 0, true, func(b []byte, f record.Flags) { got = append(got, rec{string(b), flagString(f)}) })
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestPiecesCarriesInputFlags(t *testing.T) {
	var got []rec
	Pieces([]byte("abcdef"), 4, record.FlagTruncated, func(b []byte, f record.Flags) { got = append(got, rec{string(b), flagString(f)}) })
	want := []rec{{"abcd", "truncated"}, {"ef", "continuation"}}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// FuzzStream checks the framer's accounting on any input and any chunking:
// every byte is consumed by EOF, payloads never exceed the maximum, and
// feeding the bytes in pieces gives the same records as feeding them whole.
func FuzzStream(f *testing.F) {
	for _, s := range []string{"a\nb\n", "5 <1>ab3 <2>", "<14>a\x00b\nc\x00", "0123456789abc\n", "12 <1>456789abcnext\n", "\x00\n\r", "a\x00\r\nb"} {
		f.Add([]byte(s), uint8(8), true, uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, max uint8, octet bool, chunk uint8) {
		maxRecord := int(max)
		whole, framingWhole := frameAll(t, string(in), maxRecord, octet, 0)
		pieces, framingPieces := frameAll(t, string(in), maxRecord, octet, int(chunk)+1)
		if !slices.Equal(whole, pieces) || framingWhole != framingPieces {
			t.Fatalf("chunked framing differs:\nwhole  %q\npieces %q", whole, pieces)
		}
		payload := 0
		for _, r := range whole {
			payload += len(r.msg)
		}
		if payload+framingWhole != len(in) {
			t.Fatalf("payload %d + framing %d != input %d", payload, framingWhole, len(in))
		}
		// Without delimiters or octet counting, the payloads are the input.
		if !octet && !bytes.ContainsAny(in, "\n\x00") {
			var cat strings.Builder
			for _, r := range whole {
				cat.WriteString(r.msg)
			}
			if cat.String() != string(in) {
				t.Fatalf("pieces %q do not concatenate to %q", whole, in)
			}
		}
	})
}
