package record

import (
	"bytes"
	"encoding/json"
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
	if s, ok := vals[0].Text(nil); !ok || string(s) != "web" {
		t.Errorf("Text = %q", s)
	}
}

func TestPathsLastDuplicateWins(t *testing.T) {
	p := CompilePaths("a")
	vals := make([]Value, 1)
	p.Find([]byte(`{"a":1,"b":{"a":3},"a":2}`), vals)
	if string(vals[0].Raw) != "2" {
		t.Errorf("a = %s, want the last top-level one", vals[0].Raw)
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
		got, ok := Value{Raw: []byte(in), Kind: KindString}.Text(nil)
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
		if vals[0].Kind != KindMissing {
			vals[0].Text(nil) // never panics
			vals[0].Int()
		}
		var doc map[string]any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if dec.Decode(&doc) != nil || dec.More() || bytes.IndexByte(b, '\\') >= 0 {
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
