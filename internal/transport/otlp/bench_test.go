package otlp

import (
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	"github.com/ipclab/logagg/internal/record"
)

// benchRequest is a request of n records as the Go SDK sends them: a
// 100-byte message, a severity, a timestamp and an observed timestamp,
// two attributes, one resource and scope.
func benchRequest(n int) []byte {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "bench")
	rl.Resource().Attributes().PutStr("telemetry.sdk.language", "go")
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName("bench/load")
	msg := strings.Repeat("m", 100)
	for i := range n {
		lr := sl.LogRecords().AppendEmpty()
		lr.SetTimestamp(1795382047123456789)
		lr.SetObservedTimestamp(1795382047123456999)
		lr.SetSeverityNumber(plog.SeverityNumberInfo)
		lr.Body().SetStr(msg)
		lr.Attributes().PutInt("seq", int64(i))
		lr.Attributes().PutStr("user", "42")
	}
	b, _ := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	return b
}

// BenchmarkDecode: rendering a request's records (ns/op is per record).
func BenchmarkDecode(b *testing.B) {
	req := benchRequest(512)
	var d Decoder
	b.SetBytes(int64(len(req)) / 512)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%512 == 0 {
			if err := d.Decode(req); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkDecodeEncode: rendering and the sink's encoding of each record
// (ns/op is per record).
func BenchmarkDecodeEncode(b *testing.B) {
	req := benchRequest(512)
	var d Decoder
	enc := record.NewEncoder()
	meta := &record.Meta{Transport: "otlp", Listener: "otlp://127.0.0.1:4317", Rendered: true} // as the listeners set it
	meta.Prepare()
	var out []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		j := i % 512
		if j == 0 {
			if err := d.Decode(req); err != nil {
				b.Fatal(err)
			}
			out = out[:0]
		}
		p, fl := d.Payload(j)
		out, _ = enc.Append(out, p, meta, fl)
	}
}

// BenchmarkPdata: what the Collector's receiver does with the same
// request, decoding it into pdata (ns/op is per record), for comparison.
func BenchmarkPdata(b *testing.B) {
	req := benchRequest(512)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%512 == 0 {
			r := plogotlp.NewExportRequest()
			if err := r.UnmarshalProto(req); err != nil {
				b.Fatal(err)
			}
		}
	}
}
