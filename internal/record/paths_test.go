package record

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

func TestPathsFind(t *testing.T) {
	p := CompilePaths("source", "http.status", "http", "agg.recv_ns", "user.id", "deep.a.b.c", "missing")
	line := []byte(`{"source":"web","nested":{"source":"no","http":{"status":1}},"http":{"status":503,"path":"/x\"}"},` +
		`"user":{"id":"42"},"deep":{"a":{"b":{"c":[1,{"d":2}]}}},"agg":{"recv_ns":1795730380751035434,"transport":"unix"}}`)
	vals := make([]Value, p.Len())
	if !p.Find(line, vals) {
		t.Fatal("Find failed")
	}
	want := []string{`"web"`, `503`, `{"status":503,"path":"/x\"}"}`, `1795730380751035434`, `"42"`, `[1,{"d":2}]`, ``}
	kinds := []Kind{KindString, KindNumber, KindObject, KindNumber, KindString, KindArray, KindMissing}
	for i := range want {
		if string(vals[i].Raw) != want[i] || vals[i].Kind != kinds[i] {
			t.Errorf("%s = %q (kind %d), want %q (kind %d)", p.paths[i], vals[i].Raw, vals[i].Kind, want[i], kinds[i])
		}
	}
	if n, ok := vals[1].Int(); !ok || n != 503 {
		t.Errorf("Int = %d, %v", n, ok)
	}
	var buf []byte
	if s, ok := vals[0].Text(&buf); !ok || string(s) != "web" {
		t.Errorf("Text = %q", s)
	}
}

func TestPathsFirstDuplicateWins(t *testing.T) {
	p := CompilePaths("a", "c.d")
	vals := make([]Value, 2)
	p.Find([]byte(`{"b":{"a":3},"a":1,"a":2,"c":{"d":4},"c":{"d":5}}`), vals)
	if string(vals[0].Raw) != "1" || string(vals[1].Raw) != "4" {
		t.Errorf("a = %s, c.d = %s; want the first top-level ones", vals[0].Raw, vals[1].Raw)
	}
}

// hasDuplicateKeys reports whether any object in the JSON text repeats a
// member name (encoding/json keeps the last, Find the first).
func hasDuplicateKeys(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		obj  bool
		keys map[string]bool
		key  bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		top := (*frame)(nil)
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				if top != nil && top.obj {
					top.key = true
				}
				stack = append(stack, &frame{obj: true, keys: map[string]bool{}, key: true})
				continue
			case '[':
				if top != nil && top.obj {
					top.key = true
				}
				stack = append(stack, &frame{})
				continue
			default:
				stack = stack[:len(stack)-1]
				continue
			}
		case string:
			if top != nil && top.obj && top.key {
				if top.keys[v] {
					return true
				}
				top.keys[v] = true
				top.key = false
				continue
			}
		}
		if top != nil && top.obj {
			top.key = true
		}
	}
}

func TestValueTextUnescapes(t *testing.T) {
	for in, want := range map[string]string{
		`"plain"`:              "plain",
		`"a\"b\\c\/d\n"`:       "a\"b\\c/d\n",
		`"\u00e9\ud83d\ude00"`: "é😀",
		`"\ud83d x"`:           "\uFFFD x",
		`"cut \u12"`:           `cut \u12`,
		`"trailing \"`:         `trailing \`,
	} {
		var buf []byte
		got, ok := Value{Raw: []byte(in), Kind: KindString}.Text(&buf)
		if !ok || string(got) != want {
			t.Errorf("Text(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestPathsFindAllocatesNothing(t *testing.T) {
	p := CompilePaths("http.status", "user.id")
	line := []byte(`{"message":"GET /index.html","level":"info","http":{"method":"GET","status":503},"user":{"id":"42"},"agg":{"recv_ns":1}}`)
	vals := make([]Value, p.Len())
	if n := testing.AllocsPerRun(100, func() { p.Find(line, vals) }); n != 0 {
		t.Errorf("%v allocations per Find", n)
	}
}

// jsonPath is what encoding/json finds at path in doc (nil: absent).
func jsonPath(doc map[string]any, path string) (any, bool) {
	var v any = doc
	for _, part := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[part]; !ok {
			return nil, false
		}
	}
	return v, true
}

// FuzzPaths: on any input Find never panics, and on a valid object whose
// keys need no escapes it finds what encoding/json finds.
func FuzzPaths(f *testing.F) {
	f.Add([]byte(`{"a":{"b":1},"c":"x"}`), "a.b")
	f.Add([]byte(`{"a":[{"b":2}],"a":{"b":"y\"z"}}`), "a.b")
	f.Add([]byte(`{"a" : { "b" : null } , "c":true}`), "c")
	f.Add([]byte(`{"a":"\u0041"}`), "a")
	f.Fuzz(func(t *testing.T, b []byte, path string) {
		if path == "" || strings.Contains(path, "..") {
			return
		}
		p := CompilePaths(path)
		vals := make([]Value, 1)
		ok := p.Find(b, vals)
		// What the encoder noted of the object's members finds the same.
		enc := NewEncoder()
		meta := &Meta{Transport: "t", Listener: "l"}
		meta.Prepare()
		if _, res := enc.Append(nil, b, meta, 0); res.Format == FormatJSON {
			if f := enc.Fields(); f.Index != nil {
				mvals := make([]Value, 1)
				mok := p.FindMembers(f.Index, mvals)
				if mok != ok || mvals[0].Kind != vals[0].Kind || !bytes.Equal(mvals[0].Raw, vals[0].Raw) {
					t.Fatalf("%s in %s: FindMembers %v %q, Find %v %q", path, b, mok, mvals[0].Raw, ok, vals[0].Raw)
				}
			}
		}
		if vals[0].Kind != KindMissing {
			var buf []byte
			vals[0].Text(&buf) // never panics
			vals[0].Int()
		}
		var doc map[string]any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if dec.Decode(&doc) != nil || dec.More() || bytes.IndexByte(b, '\\') >= 0 || hasDuplicateKeys(b) {
			return
		}
		if !ok {
			t.Fatalf("Find failed on valid %s", b)
		}
		want, found := jsonPath(doc, path)
		if !found {
			if vals[0].Kind != KindMissing {
				t.Fatalf("%s found %s in %s; encoding/json finds nothing", path, vals[0].Raw, b)
			}
			return
		}
		var got any
		d2 := json.NewDecoder(bytes.NewReader(vals[0].Raw))
		d2.UseNumber()
		if err := d2.Decode(&got); err != nil {
			t.Fatalf("%s: raw %q: %v", path, vals[0].Raw, err)
		}
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if !bytes.Equal(gj, wj) {
			t.Fatalf("%s in %s: got %s, encoding/json %s", path, b, gj, wj)
		}
	})
}

var obj400 = []byte(`{"timestamp":"2026-11-26T21:03:52.123456Z","level":"info","source":"api-gateway","message":"GET /v1/orders/8812 completed",` +
	`"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7","user":{"id":"42","tier":"gold"},` +
	`"client":{"ip":"10.1.2.3","agent":"curl/8.5.0"},"http":{"method":"GET","route":"/v1/orders/:id","status":503,"bytes":1834},"dur_ms":12.5}`)

func BenchmarkPathsFind400(b *testing.B) {
	p := CompilePaths("http.status")
	vals := make([]Value, 1)
	b.SetBytes(int64(len(obj400)))
	for i := 0; i < b.N; i++ {
		p.Find(obj400, vals)
	}
}

// BenchmarkPathsFindMembers400 is BenchmarkPathsFind400 with the members
// the encoder noted.
func BenchmarkPathsFindMembers400(b *testing.B) {
	enc := NewEncoder()
	meta := &Meta{Transport: "t", Listener: "l"}
	meta.Prepare()
	enc.Append(nil, obj400, meta, 0)
	f := enc.Fields()
	p := CompilePaths("http.status")
	vals := make([]Value, 1)
	b.SetBytes(int64(len(obj400)))
	for i := 0; i < b.N; i++ {
		p.FindMembers(f.Index, vals)
	}
	if string(vals[0].Raw) != "503" {
		b.Fatalf("found %q", vals[0].Raw)
	}
}

// TestValueFloat: the integer fast path agrees with strconv.ParseFloat.
func TestValueFloat(t *testing.T) {
	for _, raw := range []string{"0", "-0", "7", "503", "-42", "999999999999999", "1000000000000000", "12.5", "1e3", "-", "", "5x", "-1.5E-3"} {
		got, ok := Value{Raw: []byte(raw), Kind: KindNumber}.Float()
		want, err := strconv.ParseFloat(raw, 64)
		if ok != (err == nil) || (ok && got != want) {
			t.Errorf("Float(%q) = %v, %v; ParseFloat %v, %v", raw, got, ok, want, err)
		}
	}
}
