package record

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// topMembers decodes the top level of the JSON object payload as
// encoding/json reads it: the member names (unescaped; a lone surrogate is
// U+FFFD) and values in order, duplicates included.
func topMembers(t testing.TB, payload []byte) (names []string, values []any) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("%q: not an object: %v %v", payload, tok, err)
	}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			t.Fatalf("%q: %v", payload, err)
		}
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("%q: %v", payload, err)
		}
		names = append(names, tok.(string))
		values = append(values, v)
	}
	return names, values
}

// wantKeyFlags is the rule for the top-level names of a valid object:
// reserved_key if one is "agg", duplicate_key if a name repeats once "agg"
// is read as "producer_agg".
func wantKeyFlags(names []string) Flags {
	var f Flags
	seen := map[string]bool{}
	for _, n := range names {
		if n == "agg" {
			f |= FlagReservedKey
			n = "producer_agg"
		}
		if seen[n] {
			f |= FlagDuplicateKey
		}
		seen[n] = true
	}
	return f
}

// checkKeys checks a JSON record's output against the input: format json,
// the key flags by wantKeyFlags (besides the framer's flags in), every
// member of the input in the output under its output name with its value
// (the last one, for a repeated name, as encoding/json keeps), and our agg
// member.
func checkKeys(t testing.TB, payload, out []byte, res Result, obj map[string]any, in ...Flags) {
	t.Helper()
	names, values := topMembers(t, payload)
	var framer Flags
	for _, f := range in {
		framer |= f
	}
	if want := wantKeyFlags(names) | framer; res.Format != FormatJSON || res.Flags != want {
		t.Fatalf("%.200q: %v %v, want json %v", payload, res.Format, res.Flags.Names(), want.Names())
	}
	want := map[string]any{}
	for i, n := range names {
		if n == "agg" {
			n = "producer_agg"
		}
		want[n] = values[i]
	}
	for n, v := range want {
		if !reflect.DeepEqual(obj[n], v) {
			t.Fatalf("%.200q: member %q is %v, want %v\n%.300s", payload, n, obj[n], v, out)
		}
	}
	if len(obj) != len(want)+1 {
		t.Fatalf("%.200q: %d members out, want %d and agg\n%.300s", payload, len(obj), len(want), out)
	}
}

func TestReservedKey(t *testing.T) {
	tests := []struct {
		name, payload, body string // body: the output before our agg member
		flags               Flags
	}{
		{"agg renamed, value verbatim", `{"agg":{"x":1},"a":2}`, `{"producer_agg":{"x":1},"a":2,`, FlagReservedKey},
		{"agg last", `{"a":1,"agg":"x"}`, `{"a":1,"producer_agg":"x",`, FlagReservedKey},
		{"agg in a longer record", `{"source":"producer-1","agg":{"k":"v"},"message":"hello world"}`,
			`{"source":"producer-1","producer_agg":{"k":"v"},"message":"hello world",`, FlagReservedKey},
		{"agg spelled with escapes", `{"a":1,"\u0061g\u0067":2}`, `{"a":1,"producer_agg":2,`, FlagReservedKey},
		{"agg spelled with upper-case hex", `{"\u0061\u0067\u0067":[1,2]}`, `{"producer_agg":[1,2],`, FlagReservedKey},
		{"agg after blanks", " {\"a\":1, \"agg\" : 2}", `{"a":1, "producer_agg" : 2,`, FlagReservedKey},
		{"agg pretty-printed", "{\n  \"agg\": {\n    \"k\": 1\n  }\n}", `{   "producer_agg": {     "k": 1   } ,`, FlagReservedKey},
		{"agg twice", `{"agg":1,"agg":2}`, `{"producer_agg":1,"producer_agg":2,`, FlagReservedKey | FlagDuplicateKey},
		{"agg twice, once escaped", `{"agg":1,"x":0,"\u0061gg":2}`, `{"producer_agg":1,"x":0,"producer_agg":2,`, FlagReservedKey | FlagDuplicateKey},
		{"agg and producer_agg", `{"agg":1,"producer_agg":2}`, `{"producer_agg":1,"producer_agg":2,`, FlagReservedKey | FlagDuplicateKey},
		{"producer_agg and agg", `{"producer_agg":2,"level":"x","agg":1}`, `{"producer_agg":2,"level":"x","producer_agg":1,`, FlagReservedKey | FlagDuplicateKey},
		{"producer_agg alone is a name like any other", `{"producer_agg":2}`, `{"producer_agg":2,`, 0},
		{"nested agg is not renamed", `{"agg":{"agg":1},"x":[{"agg":2}]}`, `{"producer_agg":{"agg":1},"x":[{"agg":2}],`, FlagReservedKey},
		{"only nested agg", `{"x":{"agg":1}}`, `{"x":{"agg":1},`, 0},
		{"upper case is another name", `{"AGG":1,"Agg":2,"\u0041gg":3}`, `{"AGG":1,"Agg":2,"\u0041gg":3,`, FlagDuplicateKey},
		{"names that only contain agg", `{"aggr":1,"ag":2,"agg ":3,"\/agg":4,"_agg":5}`, `{"aggr":1,"ag":2,"agg ":3,"\/agg":4,"_agg":5,`, 0},
	}
	e := NewEncoder() // shared: the key dictionary meets every case, each twice
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for pass := 0; pass < 3; pass++ {
				var out []byte
				var res Result
				if pass == 0 {
					out, res = NewEncoder().Append(nil, []byte(tc.payload), testMeta(), 0)
				} else {
					out, res = e.Append(nil, []byte(tc.payload), testMeta(), 0)
				}
				obj := checkLine(t, out, res, 0)
				if want := tc.body + aggJSON("json", tc.flags.Names()...) + "}\n"; string(out) != want {
					t.Fatalf("pass %d:\ngot  %s\nwant %s", pass, out, want)
				}
				checkKeys(t, []byte(tc.payload), out, res, obj)
			}
		})
	}
}

func TestDuplicateKey(t *testing.T) {
	long := strings.Repeat("k", 20)
	longer := strings.Repeat("x", maxDictKey+10)
	tests := []struct {
		name, payload string
		dup           bool
	}{
		{"no repeat", `{"a":1,"b":2,"ab":3,"":4}`, false},
		{"repeat", `{"a":1,"a":2}`, true},
		{"repeat of a seed field", `{"message":"x","level":"INFO","message":"y"}`, true},
		{"empty names", `{"":1,"":2}`, true},
		{"escaped spelling", `{"a":1,"\u0061":2}`, true},
		{"escaped spelling first", `{"\u0061":1,"b":0,"a":2}`, true},
		{"both escaped", `{"\u0061b":1,"a\u0062":2}`, true},
		{"escaped solidus", `{"a\/b":1,"a/b":2}`, true},
		{"escaped quote", `{"a\"":1,"a\u0022":2}`, true},
		{"escaped control", `{"\n":1,"\u000a":2}`, true},
		{"escaped names that differ", `{"\u0061":1,"\u0062":2,"\n":3,"\t":4}`, false},
		{"UTF-8 and its escape", `{"é":1,"\u00e9":2}`, true},
		{"UTF-8 names that differ", `{"é":1,"è":2,"ü":3}`, false},
		{"surrogate pair and UTF-8", `{"😀":1,"\ud83d\ude00":2}`, true},
		{"lone surrogate is U+FFFD, as encoding/json reads it", `{"\ud800":1,"\ufffd":2}`, true},
		{"two lone surrogates", `{"\ud800":1,"\udc00":2}`, true},
		{"case differs", `{"a":1,"A":2}`, false},
		{"nested repeats are not looked at", `{"a":{"x":1,"x":2},"b":[{"y":1,"y":2}]}`, false},
		{"nested name equal to a top-level one", `{"a":1,"b":{"a":2}}`, false},
		{"long names", `{"` + long + `":1,"` + long + `":2}`, true},
		{"long names that differ in the middle", `{"` + long + `a` + long + `":1,"` + long + `b` + long + `":2}`, false},
		{"long names, escaped", `{"` + long + `a":1,"` + long + `\u0061":2}`, true},
		{"names longer than the dictionary takes", `{"` + longer + `":1,"a":0,"` + longer + `":2}`, true},
		{"names longer than the dictionary takes, different", `{"` + longer + `":1,"` + longer + `y":2}`, false},
		{"pretty-printed repeat", "{\n  \"a\": 1,\n  \"a\": 2\n}", true},
		{"40 members", string(manyMembers(40, -1)), false},
		{"40 members, last repeats the first", string(manyMembers(40, 0)), true},
		{"100 members", string(manyMembers(100, -1)), false},
		{"100 members, last repeats the second", string(manyMembers(100, 1)), true},
		{"100 members, last repeats the 70th", string(manyMembers(100, 70)), true},
		{"300 members, last repeats the 299th", string(manyMembers(300, 298)), true},
		{"100 members and an escaped repeat", strings.TrimSuffix(string(manyMembers(100, -1)), "}") + `,"\u006b5":0}`, true},
		{"escaped name among values of every kind", `{"\u0061":"s","b":{"x":[1,{"y":"}"}]},"c":true,"d":false,"e":null,"f":-1.5e3, "g" : [ ] ,"a":2}`, true},
		{"escaped name among values of every kind, no repeat", "{\"\\u0061\":\"s\",\n\"b\":{\"x\":[1]},\"c\":true,\"d\":false,\"e\":null,\"f\":-1.5e3}", false},
		{"20000 members", string(manyMembers(20000, -1)), false},
		{"20000 members, last repeats the 10000th", string(manyMembers(20000, 9999)), true},
	}
	e := NewEncoder()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for pass := 0; pass < 3; pass++ {
				enc := e
				if pass == 0 {
					enc = NewEncoder()
				}
				out, res := enc.Append(nil, []byte(tc.payload), testMeta(), 0)
				obj := checkLine(t, out, res, 0)
				if got := res.Flags&FlagDuplicateKey != 0; got != tc.dup {
					t.Fatalf("pass %d: duplicate_key %v, want %v", pass, got, tc.dup)
				}
				verbatim := strings.NewReplacer("\n", " ", "\r", " ").Replace(strings.TrimSuffix(tc.payload, "}"))
				if !bytes.HasPrefix(out, []byte(verbatim)) {
					t.Fatalf("pass %d: not copied verbatim: %.200s", pass, out)
				}
				checkKeys(t, []byte(tc.payload), out, res, obj)
			}
		})
	}
}

// TestKeyDictionary sends many records through one encoder, as a listener
// does, so that the key dictionary predicts, misses, fills and resets:
// records from a few fixed shapes (a producer's call sites), shapes that
// change, a working set of names bigger than the dictionary, and records
// with more members than it holds, some with a repeated or escaped name.
// Every record's flags and members must follow the rule.
func TestKeyDictionary(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	name := func(i int) string {
		switch i % 7 {
		case 0:
			return fmt.Sprintf("k%d", i)
		case 1:
			return fmt.Sprintf("a_longer_key_name_%d", i) // longer than sixteen bytes
		case 2:
			return fmt.Sprintf("ké%d", i) // not ASCII
		case 3:
			return fmt.Sprintf("key%d_", i)
		case 4:
			return fmt.Sprintf("%d", i)
		case 5:
			return fmt.Sprintf("name%08d", i) // twelve bytes
		default:
			return fmt.Sprintf("x%d", i)
		}
	}
	record := func(names []string) []byte {
		b := []byte{'{'}
		for i, n := range names {
			if i > 0 {
				b = append(b, ',')
			}
			b = fmt.Appendf(b, "%q:%d", n, i)
		}
		return append(b, '}')
	}
	var shapes [][]string
	for s := 0; s < 6; s++ {
		shape := []string{"time", "level", "msg"}
		for k := 0; k < 2+rng.IntN(6); k++ {
			shape = append(shape, name(s*10+k))
		}
		shapes = append(shapes, shape)
	}
	e := NewEncoder()
	m := testMeta()
	var dst []byte
	for r := 0; r < 20000; r++ {
		var names []string
		switch phase := r / 2000; {
		case phase%3 == 0: // a few shapes
			names = append(names, shapes[rng.IntN(len(shapes))]...)
		case phase%3 == 1: // names from a working set bigger than the dictionary
			for k := 0; k < 1+rng.IntN(12); k++ {
				names = append(names, name(rng.IntN(3*dictKeys)))
			}
		case phase%6 == 2: // big records
			for k := 0; k < dictKeys+rng.IntN(dictKeys); k++ {
				names = append(names, name(k+rng.IntN(4)))
			}
		default: // one big shape, sometimes cut short or with another name
			for k := 0; k < 2*dictKeys; k++ {
				names = append(names, name(k))
			}
			if rng.IntN(4) == 0 {
				names = names[:dictKeys+rng.IntN(dictKeys)]
			}
			if rng.IntN(4) == 0 {
				names[rng.IntN(len(names))] = name(1000 + rng.IntN(5))
			}
		}
		switch rng.IntN(10) {
		case 0: // a repeat
			names = append(names, names[rng.IntN(len(names))])
		case 1: // a repeat, escaped
			n := names[rng.IntN(len(names))]
			names = append(names, `\u00`+fmt.Sprintf("%02x", n[0])+n[1:])
		case 2:
			names = append(names, "agg")
		}
		payload := record(names)
		payload = bytes.ReplaceAll(payload, []byte(`"\\u00`), []byte(`"\u00`)) // %q escaped the backslash
		var res Result
		dst, res = e.Append(dst[:0], payload, m, 0)
		obj := checkLine(t, dst, res, 0)
		checkKeys(t, payload, dst, res, obj)
	}
}

// A predicted key is compared as two masked words: a key that differs from
// the prediction only in bits that the second word has set must not pass
// for it (the fuzzer found this when the two compares were combined with
// the wrong precedence).
func TestKeyPredictionComparesBothWords(t *testing.T) {
	e := NewEncoder()
	m := testMeta()
	for _, payload := range []string{
		`{"x":0,"abcdefghij":1,"message":"a message of some length"}`,
		// "`" is 'a'^1, and 'i' in the second word has bit 0 set.
		"{\"x\":0,\"`bcdefghij\":1,\"abcdefghij\":2,\"message\":\"a message of some length\"}",
	} {
		out, res := e.Append(nil, []byte(payload), m, 0)
		obj := checkLine(t, out, res, 0)
		checkKeys(t, []byte(payload), out, res, obj)
	}
}
