package otlp

import (
	"fmt"
	"strings"
	"testing"
)

// benchLine is a line as the aggregator writes a producer's 100-byte
// message.
var benchLine = []byte(fmt.Sprintf(`{"source":"bench","timestamp":"2026-11-26T12:00:00.000000Z","level":"INFO","message":%q,"producer_id":"p1","seq":12345,"sent_ns":1795382047000000000,`+
	`"agg":{"recv_ns":1795382047000000000,"transport":"unix","listener":"unix:///tmp/s","peer":{"pid":4242,"uid":1000,"gid":1000,"via":"kernel"},"format":"json"}}`,
	strings.Repeat("x", 100)))

// BenchmarkEncode: one line into a request of 4096 (ns/op per record).
func BenchmarkEncode(b *testing.B) {
	e := newLineEncoder("host")
	var req []byte
	b.SetBytes(int64(len(benchLine)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e.add(benchLine)
		if i%4096 == 4095 {
			req = e.request(req[:0])
			e.reset()
		}
	}
}
