package record

import (
	"fmt"
	"testing"
)

// Benchmarks of one record through Append with a reused dst, as a listener
// runs it. Reproduce with:
//
//	go test -bench . -benchmem -run '^$' ./internal/record/
//
// The JSON, raw and RFC 3164 paths should report 0 allocs/op
// (TestZeroAllocs and TestRFC3164ZeroAllocs assert it); RFC 5424 allocates
// inside go-syslog.
func benchAppend(b *testing.B, payload []byte) { benchAppendMeta(b, payload, testMeta()) }

func benchAppendMeta(b *testing.B, payload []byte, m *Meta) {
	e := NewEncoder()
	dst := make([]byte, 0, 2*len(payload)+512)
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		dst, _ = e.Append(dst[:0], payload, m, 0)
	}
}

// benchAppendEach runs the payloads through one encoder in turn, so that
// no record has the keys of the one before it.
func benchAppendEach(b *testing.B, payloads ...string) {
	e := NewEncoder()
	m := testMeta()
	dst := make([]byte, 0, 4096)
	size := 0
	ps := make([][]byte, len(payloads))
	for i, p := range payloads {
		ps[i] = []byte(p)
		size += len(p)
	}
	b.ReportAllocs()
	b.SetBytes(int64(size / len(payloads)))
	for i := 0; b.Loop(); i++ {
		dst, _ = e.Append(dst[:0], ps[i%len(ps)], m, 0)
	}
}

func BenchmarkAppendJSON(b *testing.B) {
	b.Run("100B", func(b *testing.B) { benchAppend(b, jsonRecord(100)) })
	b.Run("1KiB", func(b *testing.B) { benchAppend(b, jsonRecord(1024)) })
	// What "producer --seq shm 100" sends: many short members, the shape
	// where per-token cost dominates.
	b.Run("seq", func(b *testing.B) {
		benchAppend(b, []byte(`{"source":"producer-32112","timestamp":"2026-11-23T02:12:40.108511718Z","level":"INFO",`+
			`"message":"log message ","producer_id":"p2","seq":1,"sent_ns":1795399960108511718}`))
	})
	// The same members as Python's json.dumps writes them, with spaces.
	b.Run("spaced", func(b *testing.B) {
		benchAppend(b, []byte(`{"source": "producer-32112", "timestamp": "2026-11-23T02:12:40.108511718Z", "level": "INFO", `+
			`"message": "log message ", "producer_id": "p2", "seq": 1, "sent_ns": 1795399960108511718}`))
	})
	// Records as log/slog writes them from three call sites in turn: the
	// same first keys, then different attributes.
	b.Run("mixed", func(b *testing.B) {
		benchAppendEach(b,
			`{"time":"2026-11-23T02:12:40.108511718Z","level":"INFO","msg":"request done","method":"GET","path":"/api/v1/items","status":200,"dur_ms":3.2}`,
			`{"time":"2026-11-23T02:12:40.108611718Z","level":"DEBUG","msg":"cache miss","key":"items:42","ttl_s":30}`,
			`{"time":"2026-11-23T02:12:40.108711718Z","level":"WARN","msg":"slow query","query":"SELECT * FROM items","rows":1200,"dur_ms":250.5,"db":"main"}`)
	})
	// A record with more top-level members than the key dictionary holds.
	b.Run("300keys", func(b *testing.B) {
		r := []byte{'{'}
		for i := range 300 {
			if i > 0 {
				r = append(r, ',')
			}
			r = fmt.Appendf(r, `"field_%d":%d`, i, i)
		}
		benchAppend(b, append(r, '}'))
	})
}

func BenchmarkAppendRaw(b *testing.B) {
	benchAppend(b, []byte("producer_id=p1-1234 seq=42 sent_ns=1763845678123456789 GET /index.html 200 1532 bytes in 3.2ms from 10.0.0.7"))
}

// One record through the full RFC 3164 parse (the same record every time, so
// the header memo answers after the first; see
// BenchmarkAppendRFC3164Headers for the parse itself).
func BenchmarkAppendRFC3164(b *testing.B) {
	m := testMeta()
	m.ParseHostname = true // as every listener but unixgram receives it
	benchAppendMeta(b, []byte("<13>Nov 22 21:04:53 vm mytag[4711]: producer_id=p1-1234 seq=42 sent_ns=1763845678123456789 hello world"), m)
}

// BenchmarkAppendRFC3164Headers parses every record: two senders alternate,
// so the header memo never answers. The shapes are what the corpus
// (testdata/syslog-corpus.jsonl) holds most: a network line with hostname,
// glibc/logger on the local socket, Python without a timestamp,
// RSYSLOG_ForwardFormat with RFC 3339 microseconds; then srslog's default
// (a space after the PRI) and Docker's tag, which the output keeps whole.
func BenchmarkAppendRFC3164Headers(b *testing.B) {
	const body = "producer_id=p1-1234 seq=42 sent_ns=1763845678123456789 hello world"
	for _, tc := range []struct {
		name, a, b string
		host       bool
	}{
		{"network", "<13>Nov 22 21:04:53 vm mytag[4711]: ", "<13>Nov 22 21:04:53 vm other[4712]: ", true},
		{"local", "<13>Nov 22 21:04:53 mytag[4711]: ", "<13>Nov 22 21:04:53 other[4712]: ", false},
		{"python", "<14>pyapp[4711]: ", "<14>other[4712]: ", false},
		{"forward", "<13>2026-11-22T21:04:53.179335+00:00 vm mytag[4711]: ", "<13>2026-11-22T21:04:53.179336+00:00 vm mytag[4711]: ", true},
		{"srslog", "<166> 2026-11-22T21:04:53Z vm mytag[4711]: ", "<166> 2026-11-22T21:04:53Z vm other[4712]: ", true},
		{"docker", "<30>Nov 22 21:04:53 dockerd/3f2a1b9c0d1e[4711]: ", "<30>Nov 22 21:04:53 dockerd/4e5f6a7b8c9d[4711]: ", false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e := NewEncoder()
			m := testMeta()
			m.ParseHostname = tc.host
			p := [2][]byte{[]byte(tc.a + body), []byte(tc.b + body)}
			dst := make([]byte, 0, 1024)
			b.ReportAllocs()
			b.SetBytes(int64(len(p[0])))
			i := 0
			for b.Loop() {
				dst, _ = e.Append(dst[:0], p[i&1], m, 0)
				i++
			}
		})
	}
}

func BenchmarkAppendRFC5424(b *testing.B) {
	benchAppend(b, []byte(`<13>1 2026-11-22T21:04:53.179335+00:00 vm mytag 4711 - [timeQuality tzKnown="1" isSynced="0"][seq@32473 id="p1-1234" n="42" t="1763845678123456789"] hello world`))
}
