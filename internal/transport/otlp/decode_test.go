package otlp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
)

// attributeKeys are the keys of the "attributes" object of payload p, in
// the order written, and its values as JSON.
func attributeKeys(t *testing.T, p []byte) (keys []string, vals []string) {
	t.Helper()
	var rec map[string]json.RawMessage
	if err := json.Unmarshal(p, &rec); err != nil {
		t.Fatalf("payload %q: %v", p, err)
	}
	attrs, ok := rec["attributes"]
	if !ok {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(attrs))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("attributes %s: not an object", attrs)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		keys, vals = append(keys, tok.(string)), append(vals, string(v))
	}
	return keys, vals
}

// TestDecodeAttributesInOrder: a LogRecord's attributes are rendered
// whole and in the order they were sent, however many: those the first
// pass over the record keeps (maxKeptAttrs) and those past them, which
// are read again, alike; and the fields written after them (a trace id,
// flags) are rendered too.
func TestDecodeAttributesInOrder(t *testing.T) {
	for _, n := range []int{0, 1, 2, maxKeptAttrs - 1, maxKeptAttrs, maxKeptAttrs + 1, 3 * maxKeptAttrs} {
		ld := plog.NewLogs()
		lr := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
		lr.Body().SetStr("m")
		var wantKeys, wantVals []string
		for i := range n {
			k := fmt.Sprintf("k%02d", i)
			switch i % 3 {
			case 0:
				lr.Attributes().PutInt(k, int64(i))
				wantVals = append(wantVals, fmt.Sprint(i))
			case 1:
				lr.Attributes().PutStr(k, fmt.Sprintf("v%d", i))
				wantVals = append(wantVals, fmt.Sprintf("%q", fmt.Sprintf("v%d", i)))
			default:
				lr.Attributes().PutBool(k, true)
				wantVals = append(wantVals, "true")
			}
			wantKeys = append(wantKeys, k)
		}
		lr.SetSeverityNumber(plog.SeverityNumberWarn)
		lr.SetTraceID([16]byte{0xab}) // fields 8 and 9, after the attributes (6)
		lr.SetFlags(1)
		req, err := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
		if err != nil {
			t.Fatal(err)
		}
		var d Decoder
		if err := d.Decode(req); err != nil {
			t.Fatalf("%d attributes: %v", n, err)
		}
		if d.Len() != 1 {
			t.Fatalf("%d attributes: %d payloads", n, d.Len())
		}
		p, _ := d.Payload(0)
		keys, vals := attributeKeys(t, p)
		if fmt.Sprint(keys) != fmt.Sprint(wantKeys) || fmt.Sprint(vals) != fmt.Sprint(wantVals) {
			t.Errorf("%d attributes: got %v = %v, want %v = %v", n, keys, vals, wantKeys, wantVals)
		}
		if !bytes.Contains(p, []byte(`"trace_id":"ab000000000000000000000000000000"`)) || !bytes.Contains(p, []byte(`"trace_flags":1`)) ||
			!bytes.Contains(p, []byte(`"level":"warn"`)) {
			t.Errorf("%d attributes: a field around them is lost: %s", n, p)
		}
	}
}

// TestAppendTimeAsRFC3339Nano: timestamps render as time.RFC3339Nano
// writes them in UTC (trailing zeros of the fraction left out), whether
// or not the second is the one rendered before.
func TestAppendTimeAsRFC3339Nano(t *testing.T) {
	var d Decoder
	rng := rand.New(rand.NewPCG(1, 2))
	cases := []uint64{0, 1, 9, 10, 999_999_999, 1_000_000_000, 1_795_382_047_000_000_000, 1_795_382_047_100_000_000,
		1_795_382_047_123_456_789, 1_795_382_047_120_000_009, 1_795_382_048_000_000_001, math.MaxInt64, math.MaxUint64}
	for range 10000 {
		cases = append(cases, 1_700_000_000_000_000_000+rng.Uint64N(1e17), rng.Uint64N(1e9)*1e9+rng.Uint64N(1e3)*1e6)
	}
	for _, ns := range cases {
		want := time.Unix(0, int64(min(ns, math.MaxInt64))).UTC().Format(time.RFC3339Nano)
		if got := string(d.appendTime(nil, ns)); got != want {
			t.Fatalf("%d: %s, want %s", ns, got, want)
		}
	}
}
