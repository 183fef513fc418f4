package record

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// fuzzSeeds are added to every fuzz target; the checked-in corpus under
// testdata/fuzz holds further inputs the fuzzer found interesting.
var fuzzSeeds = []string{
	`{"source":"producer-1","timestamp":"2025-11-22T10:00:00.123456789Z","level":"INFO","message":"hello"}`,
	`{}`, `{"a":{"b":[1,2,{"c":null}]},"d":"\u00e9\ud83d\ude00"}`, `{"agg":1}`, `{"\u0061gg":1}`,
	`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"agg":1,"producer_agg":2}`, `{"\ud800":1,"\ufffd":2}`,
	`{"source":"p","level":"INFO","message":"a message of some length","seq":1,"level":"x"}`,
	`{"a":1,}`, `{"a":1}x`, "{\"a\":\"\x00\"}", "{\"a\":\"\xff\"}", "{\n\"a\":\r\n1\n}",
	"plain text", "", "\x00\x01\xff", "producer_id=p1 seq=1 sent_ns=2 text",
	"<13>Nov 22 21:04:53 vm mytag: hello world",
	"<13>Nov 22 21:04:53 mytag: hello world",
	`<13>1 2026-11-22T21:04:53.175263+00:00 vm mytag - - [timeQuality tzKnown="1" isSynced="0"] hello world`,
	`<13>1 2026-11-22T21:04:53.179335+00:00 vm mytag - - [timeQuality tzKnown="1" isSynced="0"][seq@32473 id="p1-9" n="42" t="1763845678123456789"] hello world`,
	`<13>1 - - mytag - - - hello world`,
	`<156>1 2026-11-22T21:04:53.183117+00:00 vm mytag 11558 M1 [timeQuality tzKnown="1" isSynced="0"] hello world`,
	"<13>Nov 22 21:04:53 vm a: x\x00y", "<13>hello", "<999>x", "<",
	"<30>Nov 26 21:03:52 dockerd/3f2a1b9c[1234]: hello", "<166> 2026-11-26T20:59:03Z vm srsapp[16296]: msg",
	"<166> garbage here: x", "<13>app[7][8]: m",
	`[1,"x",{"agg":2}]`, ` "str" `, "[INFO] starting", `"GET /" 200`, "[[[]]]", "42",
}

// maxNesting returns the deepest nesting of arrays and objects in b,
// ignoring brackets inside strings.
func maxNesting(b []byte) int {
	depth, max, inStr := 0, 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inStr && c == '\\':
			i++
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '{' || c == '[':
			depth++
			if depth > max {
				max = depth
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return max
}

// acceptableJSON reports whether the fast path promises to keep payload
// as a JSON record: encoding/json accepts it as an object, it is valid
// UTF-8 without raw control characters, and it is within the nesting
// limit. (encoding/json accepts repeated names and "agg"; checkKeys says
// what the output must then be.)
func acceptableJSON(payload []byte) (map[string]any, bool) {
	if !utf8.Valid(payload) || maxNesting(payload) > maxDepth {
		return nil, false
	}
	for _, c := range payload {
		if c < 0x20 && !isJSONSpace(c) {
			return nil, false
		}
	}
	t := bytes.TrimLeft(payload, " \t\r\n")
	if len(t) == 0 || t[0] != '{' {
		return nil, false
	}
	var obj map[string]any
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	if d.Decode(&obj) != nil || obj == nil || d.More() {
		return nil, false
	}
	if json.Unmarshal(payload, new(any)) != nil { // also rejects trailing data
		return nil, false
	}
	return obj, true
}

// notObjectJSON reports whether payload (its one trailing '\r' removed, as
// Append does) is a JSON array or string the fast path promises to flag
// json_not_object: valid as a whole for encoding/json, valid UTF-8, within
// the nesting limit.
func notObjectJSON(payload []byte) bool {
	payload = bytes.TrimSuffix(payload, []byte("\r"))
	t := bytes.TrimLeft(payload, " \t\r\n")
	return len(t) > 0 && (t[0] == '[' || t[0] == '"') && json.Valid(payload) &&
		utf8.Valid(payload) && maxNesting(payload) <= maxDepth
}

func FuzzAppend(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), uint16(0))
	}
	f.Add([]byte(`{"a":1}`), uint16(FlagTruncated|FlagPartial))
	e := NewEncoder()
	m := testMeta()
	var dst []byte
	f.Fuzz(func(t *testing.T, payload []byte, in uint16) {
		inFlags := Flags(in) & (FlagTruncated | FlagPartial | FlagFraming)
		var res Result
		dst, res = e.Append(dst[:0], payload, m, inFlags)
		out := checkLine(t, dst, res, inFlags)
		if _, ok := acceptableJSON(payload); ok {
			if res.Format != FormatJSON {
				t.Fatalf("encoding/json accepts %q but format is %v %v", payload, res.Format, res.Flags.Names())
			}
			// The members, with "agg" read as "producer_agg", and the
			// reserved_key and duplicate_key flags.
			checkKeys(t, payload, dst, res, out, inFlags)
		}
		if want := notObjectJSON(payload); want != (res.Flags&FlagNotObject != 0) || (want && res.Format != FormatRaw) {
			t.Fatalf("%q: json_not_object %v, format %v; want the flag %v", payload, res.Flags&FlagNotObject != 0, res.Format, want)
		}
		// A raw record without replaced bytes carries the payload exactly,
		// less one trailing NUL and then one trailing CR.
		if res.Format == FormatRaw && res.Flags&FlagInvalidUTF8 == 0 {
			want := string(trimEnd(payload))
			if out["message"] != want {
				t.Fatalf("raw message %q, want %q", out["message"], want)
			}
		}
	})
}

func FuzzSyslog(f *testing.F) {
	for _, s := range fuzzSeeds {
		if strings.HasPrefix(s, "<") {
			f.Add([]byte(s))
		}
	}
	e := NewEncoder()
	m := testMeta()
	var dst []byte
	f.Fuzz(func(t *testing.T, payload []byte) {
		// Steer every input into the syslog decoders.
		if len(payload) == 0 || payload[0] != '<' {
			payload = append([]byte("<"), payload...)
		}
		var res Result
		dst, res = e.Append(dst[:0], payload, m, 0)
		out := checkLine(t, dst, res, 0)
		switch res.Format {
		case FormatRFC3164, FormatRFC5424:
			if _, ok := out["syslog"].(map[string]any); !ok {
				t.Fatalf("syslog record without syslog object: %s", dst)
			}
			if msg, _ := out["message"].(string); res.Flags == 0 && !strings.HasSuffix(string(trimEnd(payload)), msg) {
				t.Fatalf("message %q is not the tail of %q", msg, payload)
			}
		case FormatRaw:
			if res.Flags&FlagSyslogParse == 0 {
				t.Fatalf("payload %q starting with '<' is raw without syslog_parse", payload)
			}
		default:
			t.Fatalf("payload %q starting with '<' decoded as %v", payload, res.Format)
		}
	})
}

// trimEnd is what Append removes from the end of every payload: one NUL,
// then one CR.
func trimEnd(p []byte) []byte {
	p = bytes.TrimSuffix(p, []byte{0})
	return bytes.TrimSuffix(p, []byte{'\r'})
}

// FuzzRFC3164 steers inputs into the RFC 3164 reader, on a network listener
// (hostname parsed) or a local socket. Whatever the input, the output is one
// valid JSON object; the format is rfc3164 or, only for a payload without a
// valid PRI, raw; a parsed message is the tail of the payload and the
// header fields are pieces of it. A second payload with the first one's
// header (what the header memo answers) must encode as a fresh encoder
// encodes it.
func FuzzRFC3164(f *testing.F) {
	for _, s := range fuzzSeeds {
		if strings.HasPrefix(s, "<") && !isRFC5424([]byte(s)) {
			f.Add([]byte(s), []byte("next message"), false)
			f.Add([]byte(s), []byte("next message"), true)
		}
	}
	e := NewEncoder()
	m := testMeta()
	var dst []byte
	f.Fuzz(func(t *testing.T, payload, next []byte, host bool) {
		if len(payload) == 0 || payload[0] != '<' {
			payload = append([]byte("<"), payload...)
		}
		if isRFC5424(payload) {
			return // go-syslog's, fuzzed by FuzzSyslog
		}
		m.ParseHostname = host
		var res Result
		dst, res = e.Append(dst[:0], payload, m, 0)
		out := checkLine(t, dst, res, 0)
		p := trimEnd(payload)
		_, _, validPRI := parsePRI(p)
		switch {
		case res.Format == FormatRFC3164 && validPRI:
			sl, ok := out["syslog"].(map[string]any)
			if !ok {
				t.Fatalf("rfc3164 record without syslog object: %s", dst)
			}
			if res.Flags&FlagInvalidUTF8 == 0 {
				msg, _ := out["message"].(string)
				if !strings.HasSuffix(string(p), msg) {
					t.Fatalf("message %q is not the tail of %q", msg, p)
				}
				for _, k := range []string{"hostname", "appname", "procid", "tag"} {
					if v, ok := sl[k].(string); ok && (v == "" || !strings.Contains(string(p), v)) {
						t.Fatalf("%s %q is not a piece of %q", k, v, p)
					}
				}
			}
			var h rfc3164Header
			h.parse(p, host)
			if _, ok := sl["hostname"]; ok && !host && !h.spaced {
				t.Fatalf("hostname parsed on a local socket: %s", dst)
			}
			// syslog_parse on a record that decoded: only for a space
			// after the PRI without a timestamp.
			if want := h.noHeader; (res.Flags&FlagSyslogParse != 0) != want || (want && out["timestamp"] != nil) {
				t.Fatalf("%q: syslog_parse %v, want %v: %s", payload, res.Flags&FlagSyslogParse != 0, want, dst)
			}
			// The TAG is kept whole exactly when it holds more than
			// appname, [procid] and ':'.
			tag, _ := sl["tag"].(string)
			app, _ := sl["appname"].(string)
			procid := string(p[h.procid.off:h.procid.end])
			if says := tag != ""; says && !strings.HasPrefix(tag, app) ||
				!says && res.Flags&FlagInvalidUTF8 == 0 && !slices.Contains([]string{"", ":", "[" + procid + "]", "[" + procid + "]:"},
					strings.TrimPrefix(string(p[h.tag.off:h.tag.end]), app)) {
				t.Fatalf("%q: tag %q with appname %q and procid %q: %s", payload, tag, app, procid, dst)
			}
		case res.Format == FormatRaw && !validPRI:
			if res.Flags&FlagSyslogParse == 0 {
				t.Fatalf("payload %q without a valid PRI is raw without syslog_parse", payload)
			}
		default:
			t.Fatalf("payload %q (valid PRI %v) decoded as %v %v", payload, validPRI, res.Format, res.Flags.Names())
		}
		if !e.memo.ok {
			return
		}
		second := append(append([]byte(nil), e.memo.hdr...), next...)
		got, gres := e.Append(nil, second, m, 0)
		want, wres := NewEncoder().Append(nil, second, m, 0)
		if !bytes.Equal(got, want) || gres != wres {
			t.Fatalf("after %q, %q:\n memo  %s\n fresh %s", payload, second, got, want)
		}
	})
}

// FuzzScanObjectMatchesNested checks the straight-line top-level scanner
// against the state machine it replaced at the top level: for every input
// starting with '{' both must agree on validity and, when valid, on every
// field of objInfo and on the "agg" keys found. scanNested checks the keys
// by the plain method (all of them hashed at the end); scanObject uses the
// key dictionary, kept from input to input as an Encoder keeps it.
func FuzzScanObjectMatchesNested(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	for _, s := range []string{
		`{ "a" : 1 , "b" : [ ] , "c" : { } }`, "{\"a\":\n{\"b\":\r[1]}}", `{"agg":{}}`, `{"x":{"agg":1}}`,
		`{"a":tru}`, `{"a":nul}`, `{"a":fals}`, `{"a":-}`, `{"a":1.}`, `{"a":"b"`, `{"a" 1}`, `{"a":1 "b":2}`,
		`{"a":[1,]}`, `{,}`, `{"a":1,}`, `{"ag":1,"aggx":2,"\u0061\u0067\u0067":3}`,
		`{"a":1,"b":2,"a":3}`, `{"time":"t","level":"l","msg":"m","k":1}`, `{"time":"t","level":"l","msg":"m","j":1}`,
		`{"a_key_longer_than_sixteen":1,"a_key_longer_than_sixteen":2}`, `{"é":1,"\u00e9":2}`,
	} {
		f.Add([]byte(s))
	}
	// One topKeys for all inputs, as an Encoder keeps it: the key
	// dictionary left by one input meets the next, and each input is
	// scanned twice, the second time with its own keys predicted.
	var tk topKeys
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '{' {
			b = append([]byte("{"), b...)
		}
		var fresh topKeys
		want, wantOK := scanNested(b, maxDepth, &fresh)
		for pass := 0; pass < 2; pass++ {
			got, gotOK := scanObject(b, &tk)
			if gotOK != wantOK || (gotOK && got != want) {
				t.Fatalf("%q pass %d: scanObject %+v %v, scanNested %+v %v", b, pass, got, gotOK, want, wantOK)
			}
			if gotOK && !slices.Equal(tk.aggs, fresh.aggs) {
				t.Fatalf("%q pass %d: scanObject found agg keys at %v, scanNested at %v", b, pass, tk.aggs, fresh.aggs)
			}
		}
	})
}
