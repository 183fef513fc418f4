package otlp

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/ipclab/logagg/internal/otlpwire"
	"github.com/ipclab/logagg/internal/record"
)

// seedRequest is a request with every field the decoder reads.
func seedRequest() []byte {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "svc")
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName("scope")
	sl.Scope().Attributes().PutInt("n", 1)
	lr := sl.LogRecords().AppendEmpty()
	lr.SetTimestamp(1)
	lr.SetObservedTimestamp(2)
	lr.SetSeverityNumber(plog.SeverityNumberError)
	lr.SetSeverityText("ERROR")
	lr.SetEventName("e")
	m := lr.Body().SetEmptyMap()
	m.PutEmptySlice("l").AppendEmpty().SetDouble(1.5)
	m.PutEmptyBytes("b").FromRaw([]byte{1})
	lr.Attributes().PutBool("ok", true)
	lr.SetTraceID([16]byte{1})
	lr.SetSpanID([8]byte{2})
	b, _ := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	return b
}

// FuzzDecode: whatever the bytes, Decode neither panics nor renders
// anything but JSON objects the encoder takes as they are; and what
// protobuf-go reads into the generated OTLP types (the reference decoder,
// which also requires UTF-8 strings), it does not refuse, but for what it
// refuses on purpose (deep nesting; trace and span ids of the wrong
// length, which the Collector refuses too). It skips fields it does not
// render without looking into them.
func FuzzDecode(f *testing.F) {
	f.Add(seedRequest())
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x02, 0x12, 0x00})
	f.Add(protowire.AppendTag(nil, otlpwire.RequestResourceLogs, protowire.BytesType))
	enc := record.NewEncoder()
	read := record.Meta{RecvNS: 1}
	read.Prepare()
	rendered := read
	rendered.Rendered = true
	f.Fuzz(func(t *testing.T, req []byte) {
		d := Decoder{MaxRecord: 4096}
		if err := d.Decode(req); err != nil {
			var de *DecodeError
			if errors.As(err, &de) && de.Cause != CauseTooDeep && de.Cause != CauseBadID && proto.Unmarshal(req, &collogspb.ExportLogsServiceRequest{}) == nil {
				t.Fatalf("refused (%v) what protobuf-go reads: %x", err, req)
			}
			return
		}
		for i := range d.Len() {
			p, fl := d.Payload(i)
			if !json.Valid(p) || p[0] != '{' {
				t.Fatalf("payload %d is not a JSON object: %q", i, p)
			}
			if len(p) > 4096 {
				t.Fatalf("payload %d is %d bytes, over MaxRecord", i, len(p))
			}
			line, res := enc.Append(nil, p, &read, fl)
			if res.Format != record.FormatJSON || !json.Valid(bytes.TrimSuffix(line, []byte("\n"))) {
				t.Fatalf("the encoder does not take payload %d as JSON: %v %q", i, res, line)
			}
			// What the receivers' records skip (Meta.Rendered) would have
			// changed nothing.
			if copied, cres := enc.Append(nil, p, &rendered, fl); cres != res || !bytes.Equal(copied, line) {
				t.Fatalf("payload %d copied as rendered makes %v %q; read, %v %q", i, cres, copied, res, line)
			}
		}
	})
}

// FuzzJSONRequest: an OTLP/JSON body is refused, or becomes a request the
// decoder reads.
func FuzzJSONRequest(f *testing.F) {
	js, _ := plogotlp.NewExportRequest().MarshalJSON()
	f.Add(js)
	f.Add([]byte(`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"x"},"traceId":"0102030405060708090a0b0c0d0e0f10"}]}]}]}`))
	f.Add([]byte(`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"kvlistValue":{"values":[{"key":"k","value":{"intValue":"5"}}]}}}]}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		pb, err := jsonToProto(body)
		if err != nil {
			return
		}
		var d Decoder
		d.Decode(pb) //nolint:errcheck // refusing is fine, panicking is not
	})
}
