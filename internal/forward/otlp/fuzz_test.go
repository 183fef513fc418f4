package otlp

import (
	"bytes"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
)

// FuzzLineEncoder: whatever a log line holds, the request made of it is
// one the Collector's decoder reads, with one record per line, and the
// line makes the same record again (from the encoder's caches) as it made
// first.
func FuzzLineEncoder(f *testing.F) {
	f.Add([]byte(line(1)))
	f.Add([]byte(`{"message":"x","level":"warn","syslog":{"severity":3,"appname":"a","procid":"1"},"agg":{"transport":"otlp","recv_ns":1}}`))
	f.Add([]byte(`{"body":{"k":[1,2.5,"s",null,true]},"attributes":{"a":{"b":"c"}},"resource":{"service.name":"s"},"scope":{"name":"n"},"trace_id":"0102030405060708090a0b0c0d0e0f10","agg":{"transport":"otlp"}}`))
	f.Add([]byte(`{"esc\u0041":"\ud83d\ude00\n","x":1e400}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, line []byte) {
		e := newLineEncoder("h")
		e.add(line)
		rec, res, scope := bytes.Clone(e.rec), bytes.Clone(e.res), bytes.Clone(e.scope)
		e.add(line)
		if !bytes.Equal(e.rec, rec) || !bytes.Equal(e.res, res) || !bytes.Equal(e.scope, scope) {
			t.Fatalf("%q made another record the second time", line)
		}
		req := plogotlp.NewExportRequest()
		if err := req.UnmarshalProto(e.request(nil)); err != nil {
			t.Fatalf("the Collector cannot read the request for %q: %v", line, err)
		}
		if n := req.Logs().LogRecordCount(); n != 2 {
			t.Fatalf("%d records for two lines %q", n, line)
		}
	})
}
