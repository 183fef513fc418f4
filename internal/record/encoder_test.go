package record

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/seqstamp"
)

// testRecvNS is 2025-11-22T20:00:00Z.
const testRecvNS = 1763841600000000000

func testMeta() *Meta {
	m := &Meta{
		RecvNS:    testRecvNS,
		Transport: "unix",
		Listener:  "unix:///run/log.sock",
		Peer:      Peer{HasCreds: true, PID: 42, UID: 1000, GID: 100, Via: "kernel"},
	}
	m.Prepare()
	return m
}

// aggJSON is what appendAgg renders for testMeta.
func aggJSON(format string, flags ...string) string {
	s := `"agg":{"recv_ns":1763841600000000000,"transport":"unix","listener":"unix:///run/log.sock",` +
		`"peer":{"pid":42,"uid":1000,"gid":100,"via":"kernel"},"format":"` + format + `"`
	if len(flags) > 0 {
		s += `,"flags":["` + strings.Join(flags, `","`) + `"]`
	}
	return s + "}"
}

// encode runs one record through a fresh encoder and checks the invariants
// every output line has: one line, valid JSON, an "agg" member whose format
// and flags agree with the Result, and the framer's flags kept.
func encode(t testing.TB, payload []byte, in Flags) ([]byte, Result, map[string]any) {
	t.Helper()
	out, res := NewEncoder().Append(nil, payload, testMeta(), in)
	obj := checkLine(t, out, res, in)
	return out, res, obj
}

func checkLine(t testing.TB, out []byte, res Result, in Flags) map[string]any {
	t.Helper()
	if len(out) == 0 || out[len(out)-1] != '\n' || bytes.Count(out, []byte("\n")) != 1 {
		t.Fatalf("output is not exactly one line ending in newline: %q", out)
	}
	if !json.Valid(out) {
		t.Fatalf("output is not valid JSON: %q", out)
	}
	var obj map[string]any
	d := json.NewDecoder(bytes.NewReader(out))
	d.UseNumber()
	if err := d.Decode(&obj); err != nil || obj == nil {
		t.Fatalf("output is not a JSON object (%v): %q", err, out)
	}
	agg, ok := obj["agg"].(map[string]any)
	if !ok {
		t.Fatalf("no agg object in %q", out)
	}
	switch f := agg["format"]; f {
	case "json", "raw", "rfc3164", "rfc5424":
		if f != res.Format.String() {
			t.Fatalf("agg.format %v, Result.Format %v", f, res.Format)
		}
	default:
		t.Fatalf("agg.format %v is not one of the four formats: %q", f, out)
	}
	var flags []string
	if fl, ok := agg["flags"].([]any); ok {
		for _, x := range fl {
			flags = append(flags, x.(string))
		}
	}
	if !reflect.DeepEqual(flags, res.Flags.Names()) {
		t.Fatalf("agg.flags %v, Result.Flags %v", flags, res.Flags.Names())
	}
	if res.Flags&in != in {
		t.Fatalf("framer flags %v lost: %v", in.Names(), res.Flags.Names())
	}
	return obj
}

func TestJSONVerbatim(t *testing.T) {
	seed := `{"source":"producer-1","timestamp":"2025-11-22T10:00:00.123456789Z","level":"INFO","message":"user login ok",` +
		`"zz_unknown":{"nested":[1,-2.5e+3,0.25,true,false,null,{"deep":"x"}]},"a":""}`
	tests := []struct {
		name, payload, want string
		in                  Flags
		flags               []string
	}{
		{"seed record, unknown and nested members kept in order", seed, seed[:len(seed)-1] + "," + aggJSON("json") + "}\n", 0, nil},
		{"empty object", `{}`, `{` + aggJSON("json") + "}\n", 0, nil},
		{"empty object with blanks", "{ \t}", "{ \t" + aggJSON("json") + "}\n", 0, nil},
		{"blanks around the object", " \t{\"a\":1} \t ", `{"a":1,` + aggJSON("json") + "}\n", 0, nil},
		{"trailing CR", "{\"a\":1}\r", `{"a":1,` + aggJSON("json") + "}\n", 0, nil},
		{"blank before closing brace", `{"a":1 }`, `{"a":1 ,` + aggJSON("json") + "}\n", 0, nil},
		{"escapes kept verbatim", `{"m":"\u00e9\ud83d\ude00 \"q\" \\ \/ \b\f\n\r\t"}`, `{"m":"\u00e9\ud83d\ude00 \"q\" \\ \/ \b\f\n\r\t",` + aggJSON("json") + "}\n", 0, nil},
		{"raw UTF-8 in strings", `{"m":"héllo 日本 🎉"}`, `{"m":"héllo 日本 🎉",` + aggJSON("json") + "}\n", 0, nil},
		{"newlines between tokens become spaces", "{\n  \"a\": 1,\r\n  \"b\": [\n 2\n ]\n}", `{   "a": 1,    "b": [  2  ] ,` + aggJSON("json") + "}\n", 0, nil},
		{"nested agg is not reserved", `{"x":{"agg":1},"y":["agg"]}`, `{"x":{"agg":1},"y":["agg"],` + aggJSON("json") + "}\n", 0, nil},
		{"key that only starts with agg", `{"aggr":1,"ag":2}`, `{"aggr":1,"ag":2,` + aggJSON("json") + "}\n", 0, nil},
		{"framer flags kept", `{"a":1}`, `{"a":1,` + aggJSON("json", "truncated", "partial", "framing") + "}\n", FlagTruncated | FlagPartial | FlagFraming, []string{"truncated", "partial", "framing"}},
		{"numbers", `{"n":[0,-0,1,-1,12.5,1e9,1E-9,-0.0e+0]}`, `{"n":[0,-0,1,-1,12.5,1e9,1E-9,-0.0e+0],` + aggJSON("json") + "}\n", 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, res, obj := encode(t, []byte(tc.payload), tc.in)
			if string(out) != tc.want {
				t.Fatalf("got  %s\nwant %s", out, tc.want)
			}
			if res.Format != FormatJSON {
				t.Fatalf("format %v, want json", res.Format)
			}
			if !reflect.DeepEqual(res.Flags.Names(), tc.flags) {
				t.Fatalf("flags %v, want %v", res.Flags.Names(), tc.flags)
			}
			// Every member of the input is in the output with the same value.
			var inObj map[string]any
			d := json.NewDecoder(strings.NewReader(tc.payload))
			d.UseNumber()
			if err := d.Decode(&inObj); err != nil {
				t.Fatal(err)
			}
			for k, v := range inObj {
				if !reflect.DeepEqual(obj[k], v) {
					t.Errorf("member %q: got %v, want %v", k, obj[k], v)
				}
			}
		})
	}
}

func TestJSONDepthLimit(t *testing.T) {
	nest := func(depth int) string {
		// depth counts the outer object.
		return `{"a":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + "}"
	}
	_, res, _ := encode(t, []byte(nest(maxDepth)), 0)
	if res.Format != FormatJSON {
		t.Errorf("depth %d: format %v, want json", maxDepth, res.Format)
	}
	_, res, obj := encode(t, []byte(nest(maxDepth+1)), 0)
	if res.Format != FormatRaw || res.Flags != FlagMalformedJSON || obj["message"] != nest(maxDepth+1) {
		t.Errorf("depth %d: %v %v, want raw malformed_json with the payload as message", maxDepth+1, res.Format, res.Flags.Names())
	}
	// Very deep input must neither crash nor recurse.
	deep := strings.Repeat(`{"a":`, 1<<16)
	_, res, _ = encode(t, []byte(deep), 0)
	if res.Flags != FlagMalformedJSON {
		t.Errorf("very deep: flags %v", res.Flags.Names())
	}
}

func TestJSONKeptAsMessage(t *testing.T) {
	tests := []struct {
		name, payload string
		flags         Flags
		message       string // "" means: the payload itself
	}{
		{"unterminated object", `{"a":1`, FlagMalformedJSON, ""},
		{"unterminated string", `{"a":"x`, FlagMalformedJSON, ""},
		{"trailing garbage", `{"a":1}x`, FlagMalformedJSON, ""},
		{"two objects", `{"a":1}{"b":2}`, FlagMalformedJSON, ""},
		{"unquoted key", `{a:1}`, FlagMalformedJSON, ""},
		{"single quotes", `{'a':1}`, FlagMalformedJSON, ""},
		{"missing colon", `{"a" 1}`, FlagMalformedJSON, ""},
		{"missing comma", `{"a":1 "b":2}`, FlagMalformedJSON, ""},
		{"trailing comma in object", `{"a":1,}`, FlagMalformedJSON, ""},
		{"trailing comma in array", `{"a":[1,]}`, FlagMalformedJSON, ""},
		{"mismatched brackets", `{"a":[1}`, FlagMalformedJSON, ""},
		{"mismatched braces", `{"a":1]`, FlagMalformedJSON, ""},
		{"leading zero", `{"a":01}`, FlagMalformedJSON, ""},
		{"bare minus", `{"a":-}`, FlagMalformedJSON, ""},
		{"dot without digits", `{"a":1.}`, FlagMalformedJSON, ""},
		{"exponent without digits", `{"a":1e+}`, FlagMalformedJSON, ""},
		{"plus sign", `{"a":+1}`, FlagMalformedJSON, ""},
		{"bad literal", `{"a":tru}`, FlagMalformedJSON, ""},
		{"literal with suffix", `{"a":nullx}`, FlagMalformedJSON, ""},
		{"bad escape", `{"a":"\x"}`, FlagMalformedJSON, ""},
		{"short unicode escape", `{"a":"\u12"}`, FlagMalformedJSON, ""},
		{"non-hex unicode escape", `{"a":"\u12g4"}`, FlagMalformedJSON, ""},
		{"raw tab in string", "{\"a\":\"x\ty\"}", FlagMalformedJSON, ""},
		{"raw newline in string", "{\"a\":\"x\ny\"}", FlagMalformedJSON, ""},
		{"NUL in string", "{\"a\":\"x\x00y\"}", FlagMalformedJSON | FlagNUL, "{\"a\":\"x\x00y\"}"},
		{"control byte in string", "{\"a\":\"x\x1by\"}", FlagMalformedJSON | FlagControl, "{\"a\":\"x\x1by\"}"},
		{"NUL between tokens", "{\"a\":1\x00}", FlagMalformedJSON | FlagNUL, "{\"a\":1\x00}"},
		{"invalid UTF-8 in string", "{\"a\":\"\xff\xfe\"}", FlagMalformedJSON | FlagInvalidUTF8, "{\"a\":\"\ufffd\ufffd\"}"},
		{"truncated UTF-8 sequence", "{\"a\":\"\xe6\x97\"}", FlagMalformedJSON | FlagInvalidUTF8, "{\"a\":\"\ufffd\ufffd\"}"},
		{"only a brace", `{`, FlagMalformedJSON, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, res, obj := encode(t, []byte(tc.payload), 0)
			if res.Format != FormatRaw || res.Flags != tc.flags {
				t.Fatalf("got %v %v, want raw %v: %s", res.Format, res.Flags.Names(), tc.flags.Names(), out)
			}
			want := tc.message
			if want == "" {
				want = tc.payload
			}
			if obj["message"] != want {
				t.Fatalf("message %q, want %q", obj["message"], want)
			}
			if len(obj) != 2 {
				t.Fatalf("want only message and agg, got %s", out)
			}
		})
	}
}

// TestNotObject: a payload that is one valid JSON array or string becomes
// a raw message flagged json_not_object; text that only starts like one,
// and numbers and literals, are plain text without a flag.
func TestNotObject(t *testing.T) {
	deep := strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1)
	tests := []struct {
		name, payload string
		in, flags     Flags
	}{
		{"array", `[1,2]`, 0, FlagNotObject},
		{"empty array", `[]`, 0, FlagNotObject},
		{"array of everything", `[1,-2.5e3,"x",true,false,null,{"a":{"b":[]}},[]]`, 0, FlagNotObject},
		{"blanks around an array", " \t[1, 2] \t", 0, FlagNotObject},
		{"pretty-printed array", "[\n  1,\r\n  {\"a\": 2}\n]", 0, FlagNotObject},
		{"array with trailing CR", "[1]\r", 0, FlagNotObject},
		{"array of objects with agg", `[{"agg":1},{"agg":2}]`, 0, FlagNotObject},
		{"string", `"x"`, 0, FlagNotObject},
		{"empty string", `""`, 0, FlagNotObject},
		{"string with escapes", `"a\nb \u00e9 \"q\""`, 0, FlagNotObject},
		{"blanks around a string", ` "x" `, 0, FlagNotObject},
		{"framer flags kept", `[1]`, FlagTruncated, FlagTruncated | FlagNotObject},
		{"array at the nesting limit", strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth), 0, FlagNotObject},

		{"log level in brackets", "[INFO] starting", 0, 0},
		{"array followed by text", "[1,2] done", 0, 0},
		{"two arrays", "[1][2]", 0, 0},
		{"unterminated array", "[1,2", 0, 0},
		{"only a bracket", "[", 0, 0},
		{"trailing comma", "[1,]", 0, 0},
		{"quoted word then text", `"GET / HTTP/1.1" 200 512`, 0, 0},
		{"unterminated string", `"x`, 0, 0},
		{"string with a raw newline", "\"a\nb\"", 0, 0},
		{"string with a raw NUL", "\"a\x00b\"", 0, FlagNUL},
		{"string with invalid UTF-8", "\"a\xffb\"", 0, FlagInvalidUTF8},
		{"number", "42", 0, 0},
		{"negative number", "-1.5e3", 0, 0},
		{"true", "true", 0, 0},
		{"null", "null", 0, 0},
		{"array deeper than the nesting limit", deep, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, res, obj := encode(t, []byte(tc.payload), tc.in)
			if res.Format != FormatRaw || res.Flags != tc.flags {
				t.Fatalf("got %v %v, want raw %v: %s", res.Format, res.Flags.Names(), tc.flags.Names(), out)
			}
			want := strings.TrimSuffix(tc.payload, "\r")
			if res.Flags&FlagInvalidUTF8 == 0 && obj["message"] != want {
				t.Fatalf("message %q, want the payload %q", obj["message"], want)
			}
			if len(obj) != 2 {
				t.Fatalf("want only message and agg, got %s", out)
			}
		})
	}
}

func TestRaw(t *testing.T) {
	long := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	tests := []struct {
		name, payload, message string
		in, flags              Flags
	}{
		{"text", "hello world", "hello world", 0, 0},
		{"empty", "", "", 0, 0},
		{"only CR", "\r", "", 0, 0},
		{"one CR stripped", "a\r\r", "a\r", 0, 0},
		{"quotes and backslashes", `say "hi" \o/`, `say "hi" \o/`, 0, 0},
		{"embedded newline and tab", "a\nb\tc", "a\nb\tc", 0, 0},
		{"binary", "\x00\x01\x1f\x7f abc", "\x00\x01\x1f\x7f abc", 0, FlagNUL | FlagControl},
		{"invalid UTF-8", "caf\xe9 \xc3", "caf\ufffd \ufffd", 0, FlagInvalidUTF8},
		{"binary and invalid UTF-8", "\x00\xff", "\x00\ufffd", 0, FlagNUL | FlagInvalidUTF8},
		{"valid UTF-8 kept", "日本語 ✓", "日本語 ✓", 0, 0},
		{"leading blank before '<' is not syslog", " <13>x", " <13>x", 0, 0},
		{"seqstamp text form", "producer_id=p1-7 seq=9 sent_ns=5 hello", "producer_id=p1-7 seq=9 sent_ns=5 hello", 0, 0},
		{"framer flags", "cut", "cut", FlagTruncated | FlagFraming, FlagTruncated | FlagFraming},
		{"very long", long, long, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, res, obj := encode(t, []byte(tc.payload), tc.in)
			if res.Format != FormatRaw || res.Flags != tc.flags {
				t.Fatalf("got %v %v, want raw %v", res.Format, res.Flags.Names(), tc.flags.Names())
			}
			if obj["message"] != tc.message {
				t.Fatalf("message %.80q, want %.80q", obj["message"], tc.message)
			}
			if len(obj) != 2 {
				t.Fatalf("want only message and agg, got %.200s", out)
			}
		})
	}
	if s, ok := seqstamp.Find([]byte(`{"message":"producer_id=p1-7 seq=9 sent_ns=5 hello"}`)); !ok || s.Seq != 9 {
		t.Errorf("text stamp not found in raw output: %+v %v", s, ok)
	}
}

// TestControlBytes: nul_bytes is NUL only, control_chars the other C0
// controls; TAB, LF and CR are text and flag nothing; DEL is valid JSON
// and flags nothing either (see jsonstr.SpecialBytes). Escaping works the
// same in raw text, in a malformed JSON record kept as text and in syslog
// fields, before and after the word-at-a-time part of a string.
func TestControlBytes(t *testing.T) {
	long := "a line longer than a word: "
	tests := []struct {
		name, payload, message string
		format                 Format
		flags                  Flags
	}{
		{"raw NUL", "a\x00b", "a\x00b", FormatRaw, FlagNUL},
		{"raw NUL after a word", long + "\x00x", long + "\x00x", FormatRaw, FlagNUL},
		{"one trailing NUL is not part of the record", "a\x00", "a", FormatRaw, 0},
		{"raw ESC", "a\x1b[31mred", "a\x1b[31mred", FormatRaw, FlagControl},
		{"raw BEL after a word", long + "\x07", long + "\x07", FormatRaw, FlagControl},
		{"raw backspace and form feed", "a\bb\fc", "a\bb\fc", FormatRaw, FlagControl},
		{"raw vertical tab", "a\vb", "a\vb", FormatRaw, FlagControl},
		{"raw 0x01 and 0x1f", "\x01\x1f", "\x01\x1f", FormatRaw, FlagControl},
		{"raw NUL and control", "\x00\x01", "\x00\x01", FormatRaw, FlagNUL | FlagControl},
		{"raw TAB, LF, CR are text", "a\tb\nc\rd", "a\tb\nc\rd", FormatRaw, 0},
		{"raw multi-line message after a word", long + "\n\tat main.go:12\r\n", long + "\n\tat main.go:12\r\n", FormatRaw, 0},
		{"raw DEL is not flagged", "a\x7fb", "a\x7fb", FormatRaw, 0},
		{"raw C1 control is a character", "a\u0085b", "a\u0085b", FormatRaw, 0},
		{"malformed JSON with NUL", "{\"a\":\"\x00\"}", "{\"a\":\"\x00\"}", FormatRaw, FlagMalformedJSON | FlagNUL},
		{"malformed JSON with ESC", "{\"a\":\"\x1b\"}", "{\"a\":\"\x1b\"}", FormatRaw, FlagMalformedJSON | FlagControl},
		{"malformed JSON with a raw TAB", "{\"a\":\"\t\"}", "{\"a\":\"\t\"}", FormatRaw, FlagMalformedJSON},
		{"JSON record with escaped controls is verbatim", `{"a":"\u0000\u001b\t"}`, "", FormatJSON, 0},
		{"JSON record with a raw DEL is verbatim", "{\"a\":\"\x7f\"}", "", FormatJSON, 0},
		{"syslog message with ESC", "<13>1 - - - - - - a\x1bb", "a\x1bb", FormatRFC5424, FlagControl},
		{"syslog message with NUL and TAB", "<13>1 - - - - - - a\x00\tb", "a\x00\tb", FormatRFC5424, FlagNUL},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, res, obj := encode(t, []byte(tc.payload), 0)
			if res.Format != tc.format || res.Flags != tc.flags {
				t.Fatalf("got %v %v, want %v %v: %q", res.Format, res.Flags.Names(), tc.format, tc.flags.Names(), out)
			}
			if tc.message != "" && obj["message"] != tc.message {
				t.Fatalf("message %q, want %q", obj["message"], tc.message)
			}
			if tc.format == FormatJSON && !bytes.HasPrefix(out, []byte(tc.payload[:len(tc.payload)-1])) {
				t.Fatalf("JSON record not copied verbatim: %q", out)
			}
		})
	}
}

func TestVeryLongJSON(t *testing.T) {
	long := strings.Repeat("é0123456789", 100000)
	payload := `{"message":"` + long + `","n":1}`
	out, res, obj := encode(t, []byte(payload), 0)
	if res.Format != FormatJSON || obj["message"] != long {
		t.Fatalf("format %v, message length %d", res.Format, len(obj["message"].(string)))
	}
	if !bytes.HasPrefix(out, []byte(payload[:len(payload)-1])) {
		t.Fatal("long object not copied verbatim")
	}
}

func TestNilMeta(t *testing.T) {
	out, res := NewEncoder().Append(nil, []byte(`{"a":1}`), nil, 0)
	obj := checkLine(t, out, res, 0)
	if obj["a"] == nil || res.Format != FormatJSON {
		t.Fatalf("nil Meta: %s", out)
	}
}

func TestAppendKeepsDst(t *testing.T) {
	e := NewEncoder()
	m := testMeta()
	dst := []byte("previous line\n")
	dst, _ = e.Append(dst, []byte(`{"a":1}`), m, 0)
	dst, _ = e.Append(dst, []byte("text"), m, 0)
	lines := bytes.Split(bytes.TrimSuffix(dst, []byte("\n")), []byte("\n"))
	if len(lines) != 3 || string(lines[0]) != "previous line" || !json.Valid(lines[1]) || !json.Valid(lines[2]) {
		t.Fatalf("Append did not append: %q", dst)
	}
}

// TestZeroAllocs asserts the JSON fast path and the raw path allocate
// nothing per record once dst is big enough. It counts allocations, it
// does not time anything.
func TestZeroAllocs(t *testing.T) {
	e := NewEncoder()
	m := testMeta()
	for name, payload := range map[string][]byte{
		"json 100B":        jsonRecord(100),
		"json 1KiB":        jsonRecord(1024),
		"json multiline":   []byte("{\n\"a\": [1, {\"b\": null}],\n\"c\": \"\\u00e9\"\n}"),
		"raw":              []byte("Nov 22 21:04:53 plain text line with \"quotes\" and UTF-8 ✓"),
		"raw binary":       []byte("\x00\xff binary"),
		"malformed json":   []byte(`{"a":1,}`),
		"not an object":    []byte(`[1,"x",{"a":null}]`),
		"text in brackets": []byte("[INFO] starting"),
		"reserved key":     []byte(`{"agg":1}`),
	} {
		dst := make([]byte, 0, 4096)
		allocs := testing.AllocsPerRun(200, func() {
			dst, _ = e.Append(dst[:0], payload, m, FlagPartial)
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per record, want 0", name, allocs)
		}
	}
	// Records of different shapes in turn, as one producer's call sites
	// send them: the key dictionary predicts, misses and looks up.
	shapes := [][]byte{
		[]byte(`{"time":"2026-11-23T02:12:40Z","level":"INFO","msg":"request done","method":"GET","status":200}`),
		[]byte(`{"time":"2026-11-23T02:12:40Z","level":"DEBUG","msg":"cache miss","key":"items:42","ttl_s":30}`),
		[]byte(`{"time":"2026-11-23T02:12:40Z","level":"WARN","msg":"slow","query":"SELECT 1","rows":1,"msg":"x"}`),
		manyMembers(100, -1),
	}
	dst := make([]byte, 0, 4096)
	k := 0
	if allocs := testing.AllocsPerRun(200, func() {
		dst, _ = e.Append(dst[:0], shapes[k%len(shapes)], m, 0)
		k++
	}); allocs != 0 {
		t.Errorf("shapes in turn: %v allocations per record, want 0", allocs)
	}
}

// manyMembers returns an object with n members k0..k(n-1); if rep >= 0 the
// last member repeats the name of member rep.
func manyMembers(n, rep int) []byte {
	b := []byte{'{'}
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		k := i
		if i == n-1 && rep >= 0 {
			k = rep
		}
		b = fmt.Appendf(b, `"k%d":%d`, k, i)
	}
	return append(b, '}')
}

// jsonRecord returns a seed-shaped JSON record of about size bytes.
func jsonRecord(size int) []byte {
	head := `{"source":"producer-1","timestamp":"2025-11-22T10:00:00.123456789Z","level":"INFO","producer_id":"p1-1","seq":42,"message":"`
	tail := `"}`
	n := size - len(head) - len(tail)
	if n < 1 {
		n = 1
	}
	return []byte(head + strings.Repeat("x", n) + tail)
}

// TestSyslog covers RFC 5424 and payloads that start with '<' without a
// valid PRI; rfc3164_test.go covers RFC 3164.
func TestSyslog(t *testing.T) {
	type fields = map[string]any
	tests := []struct {
		name    string
		payload string
		in      Flags
		format  Format
		flags   Flags
		want    fields // top-level members expected (syslog compared as a whole)
		absent  []string
	}{
		{name: "bad priority", payload: "<999>x", format: FormatRaw, flags: FlagSyslogParse, want: fields{"message": "<999>x"}},
		{name: "not a priority", payload: "<abc> hi", format: FormatRaw, flags: FlagSyslogParse, want: fields{"message": "<abc> hi"}},
		{name: "lone '<'", payload: "<", format: FormatRaw, flags: FlagSyslogParse, want: fields{"message": "<"}},
		{name: "html", payload: "<html><body>", format: FormatRaw, flags: FlagSyslogParse, want: fields{"message": "<html><body>"}},
		{
			name:    "rfc5424 as logger sends it, with seq stamp",
			payload: `<13>1 2026-11-22T21:04:53.175263+00:00 vm mytag - - [timeQuality tzKnown="1" isSynced="0"][seq@32473 id="p1-9" n="42" t="1763845678123456789"] hello world`,
			format:  FormatRFC5424,
			want: fields{"message": "hello world", "level": "notice", "source": "mytag",
				"timestamp":   "2026-11-22T21:04:53.175263Z",
				"producer_id": "p1-9", "seq": "42", "sent_ns": "1763845678123456789",
				"syslog": fields{"facility": "1", "severity": "5", "hostname": "vm", "appname": "mytag",
					"sd": fields{"timeQuality": fields{"tzKnown": "1", "isSynced": "0"},
						"seq@32473": fields{"id": "p1-9", "n": "42", "t": "1763845678123456789"}}}},
		},
		{
			name:    "rfc5424 all fields, escaped SD value, BOM",
			payload: "<156>1 2025-11-22T10:00:00.123456+02:00 host.example app 1234 ID47 [ex@1 a=\"q\\\"z\\]\" b=\"\"] \xef\xbb\xbfBOM message",
			format:  FormatRFC5424,
			want: fields{"message": "BOM message", "level": "warning", "source": "app",
				"timestamp": "2025-11-22T10:00:00.123456+02:00",
				"syslog": fields{"facility": "19", "severity": "4", "hostname": "host.example", "appname": "app",
					"procid": "1234", "msgid": "ID47", "sd": fields{"ex@1": fields{"a": "q\"z]", "b": ""}}}},
			absent: []string{"producer_id", "seq"},
		},
		{
			name:    "rfc5424 nil values",
			payload: "<13>1 - - mytag - - - hello world",
			format:  FormatRFC5424,
			want: fields{"message": "hello world", "level": "notice", "source": "mytag",
				"syslog": fields{"facility": "1", "severity": "5", "appname": "mytag"}},
			absent: []string{"timestamp"},
		},
		{
			name:    "rfc5424 source falls back to hostname",
			payload: "<14>1 - myhost - - - -",
			format:  FormatRFC5424,
			want:    fields{"message": "", "level": "info", "source": "myhost", "syslog": fields{"facility": "1", "severity": "6", "hostname": "myhost"}},
		},
		{
			name:    "rfc5424 bad seq number is not a stamp",
			payload: `<13>1 - - - - - [seq@32473 id="p" n="x"] m`,
			format:  FormatRFC5424,
			want:    fields{"message": "m"},
			absent:  []string{"producer_id", "seq", "sent_ns", "source"},
		},
		{
			name:    "rfc5424 invalid UTF-8 and NUL in message",
			payload: "<13>1 - - - - - - a\x00\xff",
			format:  FormatRFC5424,
			flags:   FlagNUL | FlagInvalidUTF8,
			want:    fields{"message": "a\x00\ufffd"},
		},
		{
			name:    "rfc5424 framer flags kept",
			payload: "<13>1 - - - - - - m",
			in:      FlagTruncated,
			format:  FormatRFC5424,
			flags:   FlagTruncated,
			want:    fields{"message": "m"},
		},
		{name: "rfc5424 bad timestamp", payload: "<13>1 x", format: FormatRaw, flags: FlagSyslogParse, want: fields{"message": "<13>1 x"}},
		{name: "rfc5424 unterminated SD", payload: `<13>1 - - mytag - - [a b="1" hello`, format: FormatRaw, flags: FlagSyslogParse, want: fields{"message": `<13>1 - - mytag - - [a b="1" hello`}},
		{name: "rfc5424 header cut short", payload: "<13>1 - - -", format: FormatRaw, flags: FlagSyslogParse, want: fields{"message": "<13>1 - - -"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, res, obj := encode(t, []byte(tc.payload), tc.in)
			if res.Format != tc.format || res.Flags != tc.flags {
				t.Fatalf("got %v %v, want %v %v: %s", res.Format, res.Flags.Names(), tc.format, tc.flags.Names(), out)
			}
			for k, v := range tc.want {
				if got := normalize(obj[k]); !reflect.DeepEqual(got, normalize(v)) {
					t.Errorf("%s: got %#v, want %#v\n%s", k, got, v, out)
				}
			}
			for _, k := range tc.absent {
				if _, ok := obj[k]; ok {
					t.Errorf("%s present: %s", k, out)
				}
			}
			if tc.format == FormatRaw && len(obj) != 2 {
				t.Errorf("want only message and agg: %s", out)
			}
		})
	}
}

// normalize turns json.Number into its string so expectations can be
// written as strings.
func normalize(v any) any {
	switch x := v.(type) {
	case json.Number:
		return string(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, v := range x {
			out[k] = normalize(v)
		}
		return out
	default:
		return v
	}
}

func TestSyslogSeqStampFound(t *testing.T) {
	payload := `<13>1 - - p - - [seq@32473 id="p3-991" n="12345" t="1763845678123456789"] x`
	out, res, _ := encode(t, []byte(payload), 0)
	s, ok := seqstamp.Find(out)
	want := seqstamp.Stamp{Producer: "p3-991", Seq: 12345, SentNS: 1763845678123456789}
	if res.Format != FormatRFC5424 || !ok || s != want {
		t.Fatalf("seqstamp.Find = %+v %v, want %+v: %s", s, ok, want, out)
	}
}

// TestRFC3164Year checks the year inference: the receive year, except for a
// timestamp far in the future, which belongs to the previous year.
func TestRFC3164Year(t *testing.T) {
	e := NewEncoder()
	for _, tc := range []struct {
		recv  time.Time
		stamp string
		want  time.Time
	}{
		{time.Date(2026, 1, 1, 0, 0, 10, 0, time.Local), "Dec 31 23:59:59", time.Date(2025, 12, 31, 23, 59, 59, 0, time.Local)},
		{time.Date(2026, 1, 1, 0, 0, 10, 0, time.Local), "Jan  1 00:00:09", time.Date(2026, 1, 1, 0, 0, 9, 0, time.Local)},
		{time.Date(2027, 6, 1, 0, 0, 0, 0, time.Local), "Jun  1 00:00:00", time.Date(2027, 6, 1, 0, 0, 0, 0, time.Local)},
		{time.Date(2024, 2, 29, 12, 0, 0, 0, time.Local), "Feb 29 11:00:00", time.Date(2024, 2, 29, 11, 0, 0, 0, time.Local)},
	} {
		m := testMeta()
		m.RecvNS = tc.recv.UnixNano()
		out, res := e.Append(nil, []byte("<13>"+tc.stamp+" h app: x"), m, 0)
		obj := checkLine(t, out, res, 0)
		if got := obj["timestamp"]; got != tc.want.Format(time.RFC3339Nano) {
			t.Errorf("received %v, stamp %q: timestamp %v, want %v", tc.recv, tc.stamp, got, tc.want.Format(time.RFC3339Nano))
		}
	}
}

// TestEncoderReuse runs many different records through one encoder, as a
// listener does, and checks each result equals a fresh encoder's.
func TestEncoderReuse(t *testing.T) {
	payloads := []string{
		`<13>1 - - a - - [x@1 k="1"][y@1 k="2" j="3"] m1`,
		`{"a":1}`,
		"<13>Nov 22 21:04:53 vm a: x",
		`<13>1 - - b - - [z@1 k="9"] m2`,
		"raw",
		`<13>1 - - c - - - m3`,
	}
	e := NewEncoder()
	m := testMeta()
	var dst []byte
	for round := 0; round < 3; round++ {
		for _, p := range payloads {
			dst, _ = e.Append(dst[:0], []byte(p), m, 0)
			want, _ := NewEncoder().Append(nil, []byte(p), m, 0)
			if !bytes.Equal(dst, want) {
				t.Fatalf("reused encoder: %s\nfresh encoder: %s", dst, want)
			}
		}
	}
}

// The encoder formats agg.recv_ns once per receive time (decimalMemo): a
// changed time, and a return to an earlier one, must still be rendered.
func TestRecvNSFollowsMeta(t *testing.T) {
	e := NewEncoder()
	m := testMeta()
	for _, ns := range []int64{testRecvNS, testRecvNS, 7, 1<<63 - 1, 0, testRecvNS} {
		m.RecvNS = ns
		dst, _ := e.Append(nil, []byte(`{"a":1}`), m, 0)
		var out struct {
			Agg struct {
				RecvNS int64 `json:"recv_ns"`
			} `json:"agg"`
		}
		if err := json.Unmarshal(dst, &out); err != nil {
			t.Fatalf("%s: %v", dst, err)
		}
		if out.Agg.RecvNS != ns {
			t.Fatalf("recv_ns %d, want %d: %s", out.Agg.RecvNS, ns, dst)
		}
	}
}
