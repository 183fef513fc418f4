package otlp

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	"github.com/ipclab/logagg/internal/record"
	recv "github.com/ipclab/logagg/internal/transport/otlp"
)

// decode reads what the encoder made with the Collector's own decoder.
func decode(t *testing.T, req []byte) plog.Logs {
	t.Helper()
	r := plogotlp.NewExportRequest()
	if err := r.UnmarshalProto(req); err != nil {
		t.Fatalf("the Collector's decoder refuses the request: %v", err)
	}
	return r.Logs()
}

func encodeLines(t *testing.T, lines ...string) plog.Logs {
	t.Helper()
	e := newLineEncoder("thishost")
	for _, l := range lines {
		e.add([]byte(l))
	}
	return decode(t, e.request(nil))
}

// only returns the one record of ld, and its resource and scope.
func only(t *testing.T, ld plog.Logs) (plog.LogRecord, pcommon.Resource, pcommon.InstrumentationScope) {
	t.Helper()
	if ld.LogRecordCount() != 1 {
		t.Fatalf("%d records", ld.LogRecordCount())
	}
	rl := ld.ResourceLogs().At(0)
	sl := rl.ScopeLogs().At(0)
	return sl.LogRecords().At(0), rl.Resource(), sl.Scope()
}

func attr(m pcommon.Map, k string) string {
	v, ok := m.Get(k)
	if !ok {
		return "<missing>"
	}
	return v.AsString()
}

func TestMapSyslogRecord(t *testing.T) {
	line := `{"message":"Accepted publickey for root","level":"info","source":"sshd","timestamp":"2026-11-23T04:33:41.5Z",` +
		`"syslog":{"facility":4,"severity":6,"hostname":"web-1","appname":"sshd","procid":"812","msgid":"-"},` +
		`"agg":{"recv_ns":1795382047421931686,"transport":"unixgram","listener":"unixgram:///dev/log","peer":{"pid":812,"uid":0,"gid":0,"via":"kernel"},"format":"rfc3164","flags":["control_chars"]}}`
	lr, res, _ := only(t, encodeLines(t, line))
	if lr.Body().Str() != "Accepted publickey for root" {
		t.Errorf("body %q", lr.Body().AsString())
	}
	if lr.SeverityNumber() != plog.SeverityNumberInfo || lr.SeverityText() != "info" {
		t.Errorf("severity %v %q", lr.SeverityNumber(), lr.SeverityText())
	}
	if want := time.Date(2026, 11, 23, 4, 33, 41, 5e8, time.UTC); !lr.Timestamp().AsTime().Equal(want) {
		t.Errorf("time %v", lr.Timestamp().AsTime())
	}
	if lr.ObservedTimestamp() != 1795382047421931686 {
		t.Errorf("observed %d", lr.ObservedTimestamp())
	}
	for k, want := range map[string]string{"service.name": "sshd", "host.name": "web-1", "process.pid": "812"} {
		if got := attr(res.Attributes(), k); got != want {
			t.Errorf("resource %s = %s, want %s", k, got, want)
		}
	}
	a := lr.Attributes()
	for k, want := range map[string]string{"syslog.facility": "4", "syslog.msgid": "-", "logagg.transport": "unixgram",
		"logagg.peer.uid": "0", "logagg.listener": "unixgram:///dev/log", "logagg.flags": `["control_chars"]`, "source": "sshd"} {
		if got := attr(a, k); got != want {
			t.Errorf("attribute %s = %s, want %s", k, got, want)
		}
	}
	if _, ok := a.Get("syslog.severity"); ok {
		t.Errorf("syslog.severity kept as an attribute besides the severity number")
	}
	if v, _ := a.Get("syslog.facility"); v.Type() != pcommon.ValueTypeInt {
		t.Errorf("syslog.facility is a %v, want an int", v.Type())
	}
}

func TestMapJSONAndFileRecords(t *testing.T) {
	ld := encodeLines(t,
		`{"level":"ERROR","msg":"boom","http":{"status":503,"ok":false},"ratio":0.5,"tags":["a","b"],"n":null,"esc":"tab\there \u00e9\ud83d\ude00",`+
			`"producer_id":"p1","seq":7,"sent_ns":1,"agg":{"recv_ns":5,"transport":"tcp","listener":"tcp://127.0.0.1:9000","format":"json"}}`,
		`{"message":"GET / 200","agg":{"recv_ns":6,"transport":"file","listener":"file:///var/log/nginx/*.log","file":"/var/log/nginx/access.log","format":"raw"}}`,
		`not json at all`,
	)
	if ld.LogRecordCount() != 3 {
		t.Fatalf("%d records", ld.LogRecordCount())
	}
	var recs []plog.LogRecord
	for i := range ld.ResourceLogs().Len() {
		rl := ld.ResourceLogs().At(i)
		for j := range rl.ScopeLogs().Len() {
			for k := range rl.ScopeLogs().At(j).LogRecords().Len() {
				recs = append(recs, rl.ScopeLogs().At(j).LogRecords().At(k))
			}
		}
	}
	a := recs[0].Attributes()
	if recs[0].SeverityNumber() != plog.SeverityNumberError || recs[0].Body().Type() != pcommon.ValueTypeEmpty {
		t.Errorf("severity %v body %v", recs[0].SeverityNumber(), recs[0].Body().AsString())
	}
	if v, _ := a.Get("http"); v.Type() != pcommon.ValueTypeMap || attr(v.Map(), "status") != "503" {
		t.Errorf("http = %v", v.AsString())
	}
	if v, _ := a.Get("ratio"); v.Double() != 0.5 {
		t.Errorf("ratio = %v", v.AsString())
	}
	if v, _ := a.Get("tags"); v.Slice().Len() != 2 {
		t.Errorf("tags = %v", v.AsString())
	}
	if got := attr(a, "esc"); got != "tab\there é😀" {
		t.Errorf("escaped string %q", got)
	}
	if got := attr(a, "seq"); got != "7" {
		t.Errorf("seq %q", got)
	}
	if got := attr(recs[1].Attributes(), "log.file.path"); got != "/var/log/nginx/access.log" {
		t.Errorf("log.file.path = %q", got)
	}
	if got := attr(recs[1].Attributes(), "logagg.file"); got != "<missing>" {
		t.Errorf("the path is also logagg.file %q", got)
	}
	if recs[2].Body().Str() != "not json at all" {
		t.Errorf("a line that is no JSON object: body %q", recs[2].Body().AsString())
	}
}

// TestRoundTrip: OTLP in (our receiver's rendering, the sink's encoder
// adding agg) and OTLP out gives back what came in.
func TestRoundTrip(t *testing.T) {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "checkout")
	rl.Resource().Attributes().PutInt("process.pid", 4242)
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName("shop/cart")
	sl.Scope().SetVersion("1.2.3")
	sl.Scope().Attributes().PutBool("sampled", true)
	for i := range 3 {
		lr := sl.LogRecords().AppendEmpty()
		lr.SetTimestamp(pcommon.Timestamp(1795382047123456789 + i))
		lr.SetObservedTimestamp(pcommon.Timestamp(1795382047999999999))
		lr.SetSeverityNumber(plog.SeverityNumberWarn2)
		lr.SetSeverityText("WARNING")
		lr.SetEventName("cart.checkout")
		lr.SetFlags(plog.DefaultLogRecordFlags.WithIsSampled(true))
		tid, _ := hex.DecodeString("0102030405060708090a0b0c0d0e0f10")
		sid, _ := hex.DecodeString("1112131415161718")
		lr.SetTraceID(pcommon.TraceID(tid))
		lr.SetSpanID(pcommon.SpanID(sid))
		switch i {
		case 0:
			lr.Body().SetStr(fmt.Sprintf("message %d with \"quotes\" and \x01", i))
		case 1:
			m := lr.Body().SetEmptyMap()
			m.PutStr("k", "v")
			m.PutEmptySlice("list").AppendEmpty().SetInt(-7)
		case 2:
			lr.Body().SetEmptyBytes().FromRaw([]byte{0, 1, 2, 255})
		}
		lr.Attributes().PutInt("http.status", 503)
		lr.Attributes().PutDouble("ratio", 0.25)
		lr.Attributes().PutEmptyMap("user").PutStr("id", "42")
	}
	pb, err := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	var dec recv.Decoder
	if err := dec.Decode(pb); err != nil {
		t.Fatal(err)
	}
	enc := record.NewEncoder()
	meta := &record.Meta{Transport: "otlp", Listener: "otlp://127.0.0.1:4317", RecvNS: 1795382048000000000}
	meta.Prepare()
	le := newLineEncoder("thishost")
	for i := range dec.Len() {
		p, fl := dec.Payload(i)
		line, _ := enc.Append(nil, p, meta, fl)
		le.add([]byte(strings.TrimSuffix(string(line), "\n")))
	}
	got := decode(t, le.request(nil))
	if got.LogRecordCount() != 3 || got.ResourceLogs().Len() != 1 {
		t.Fatalf("%d records in %d resources", got.LogRecordCount(), got.ResourceLogs().Len())
	}
	grl := got.ResourceLogs().At(0)
	if !grl.Resource().Attributes().Equal(rl.Resource().Attributes()) {
		t.Errorf("resource %v, want %v", grl.Resource().Attributes().AsRaw(), rl.Resource().Attributes().AsRaw())
	}
	gsl := grl.ScopeLogs().At(0)
	if gsl.Scope().Name() != "shop/cart" || gsl.Scope().Version() != "1.2.3" || !gsl.Scope().Attributes().Equal(sl.Scope().Attributes()) {
		t.Errorf("scope %v %v %v", gsl.Scope().Name(), gsl.Scope().Version(), gsl.Scope().Attributes().AsRaw())
	}
	for i := range 3 {
		w, g := sl.LogRecords().At(i), gsl.LogRecords().At(i)
		if g.Timestamp() != w.Timestamp() || g.ObservedTimestamp() != w.ObservedTimestamp() {
			t.Errorf("record %d: times %d %d", i, g.Timestamp(), g.ObservedTimestamp())
		}
		if g.SeverityNumber() != w.SeverityNumber() || g.SeverityText() != w.SeverityText() || g.EventName() != w.EventName() {
			t.Errorf("record %d: severity %v %q event %q", i, g.SeverityNumber(), g.SeverityText(), g.EventName())
		}
		if g.TraceID() != w.TraceID() || g.SpanID() != w.SpanID() || g.Flags() != w.Flags() {
			t.Errorf("record %d: trace %v span %v flags %v", i, g.TraceID(), g.SpanID(), g.Flags())
		}
		body := w.Body().AsRaw()
		if w.Body().Type() == pcommon.ValueTypeBytes {
			body = w.Body().AsString() // bytes come back as their base64 text
		}
		if fmt.Sprint(g.Body().AsRaw()) != fmt.Sprint(body) {
			t.Errorf("record %d: body %v, want %v", i, g.Body().AsRaw(), body)
		}
		for _, k := range []string{"http.status", "ratio", "user"} {
			wv, _ := w.Attributes().Get(k)
			gv, ok := g.Attributes().Get(k)
			if !ok || !gv.Equal(wv) {
				t.Errorf("record %d: attribute %s = %v, want %v", i, k, gv.AsRaw(), wv.AsRaw())
			}
		}
		if got := attr(g.Attributes(), "logagg.transport"); got != "otlp" {
			t.Errorf("record %d: logagg.transport = %s", i, got)
		}
	}
}

func TestEndMsgMovesLongContent(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 300, 16383, 16384, 70000} {
		b, start := beginMsg([]byte{0xAA}, 5)
		b = append(b, make([]byte, n)...)
		for i := range n {
			b[start+i] = byte(i)
		}
		b = endMsg(b, start)
		ld := b[1:]
		_ = ld
		if len(b) != 1+1+protowireSize(n)+n {
			t.Fatalf("n %d: %d bytes", n, len(b))
		}
		body := b[len(b)-n:]
		for i := range n {
			if body[i] != byte(i) {
				t.Fatalf("n %d: content moved wrong at %d", n, i)
			}
		}
	}
}

func protowireSize(n int) int {
	s := 1
	for n >= 0x80 {
		n >>= 7
		s++
	}
	return s
}

// TestCachesChangeNothing: an encoder that has seen other lines (its
// caches of agg, the resource, the second and the group warm or stale)
// makes of each line the record, resource and scope a fresh one makes, and
// the request holds every record once, under its own resource.
func TestCachesChangeNothing(t *testing.T) {
	jsonLine := func(ts, source string, recv int64, aggTail string) string {
		return fmt.Sprintf(`{"source":%q,"timestamp":%q,"level":"INFO","message":"m","seq":7,"agg":{"recv_ns":%d,%s}}`,
			source, ts, recv, aggTail)
	}
	unix := `"transport":"unix","listener":"unix:///s","peer":{"pid":4242,"uid":0,"gid":0,"via":"kernel"},"format":"json"`
	otherPeer := `"transport":"unix","listener":"unix:///s","peer":{"pid":4343,"uid":0,"gid":0,"via":"kernel"},"format":"json"`
	file := `"transport":"file","listener":"file:///var/log/a.log","file":"/var/log/a.log","format":"raw"`
	lines := []string{
		jsonLine("2026-11-26T12:00:00.000001Z", "a", 1, unix),
		jsonLine("2026-11-26T12:00:00.5Z", "a", 2, unix),
		jsonLine("2026-11-26T12:00:00Z", "a", 3, unix),
		jsonLine("2026-11-26T12:00:00.123456789Z", "a", 4, otherPeer),
		jsonLine("2026-11-26T12:00:00.1234567891Z", "a", 5, otherPeer), // ten digits: parsed, not cached
		jsonLine("2026-11-26T12:00:00.5+01:00", "a", 6, unix),          // the same text, another zone
		jsonLine("2026-11-26T12:00:00.x5Z", "a", 7, unix),
		jsonLine("2026-11-26T12:00:01.25Z", "b", 8, unix),
		jsonLine("1970-01-01T00:00:00.5Z", "b", 9, unix),
		jsonLine("1970-01-01T00:00:00.000000000Z", "b", 10, unix), // zero: no time
		jsonLine("2026-11-26T12:00:01.25Z", "b", 11, file),
		jsonLine("2026-11-26T12:00:01.25Z", "a", 12, file),
		`{"message":"m","agg":{"transport":"unix","recv_ns":13,"peer":{"pid":1}}}`, // recv_ns not first
		`{"message":"m","agg":{"recv_ns":14,"recv_ns":15,"peer":{"pid":1}}}`,       // twice
		`{"message":"m","agg":{"recv_ns":16,"recv_ns":17,"peer":{"pid":1}}}`,       // again: not from a cache
		`{"message":"m","agg":{"recv_ns":18,"peer":{"pid":1},"transport":"otlp","format":"json"},"resource":{"service.name":"s"},"scope":{"name":"n"}}`,
		`{"message":"m","agg":{"recv_ns":19,"peer":{"pid":1},"transport":"otlp","format":"json"},"resource":{"service.name":"t"},"scope":{"name":"n"}}`,
		`{"message":"m","syslog":{"appname":"sshd","hostname":"h1","procid":"812"},"agg":{"recv_ns":20,"peer":{"pid":1}}}`,
		`{"message":"m","syslog":{"appname":"sshd","hostname":"h2","procid":"812"},"agg":{"recv_ns":21,"peer":{"pid":1}}}`,
		`{"message":"m","syslog":{"appname":"sshd","hostname":"h2"},"agg":{"recv_ns":22,"peer":{"pid":1}}}`,
		`{"message":"m","syslog":{"appname":"sshd","hostname":"h2"},"agg":{"recv_ns":23}}`,
		`{"message":"m","source":"sshd","agg":{"recv_ns":24}}`,
		`{"message":"m","source":"sshd","syslog":{},"agg":{"recv_ns":25}}`,
		`not json`,
		jsonLine("2026-11-26T12:00:00.000001Z", "a", 26, unix),
	}
	warm := newLineEncoder("thishost")
	for round := range 2 { // the second round meets every cache filled by the first
		for i, l := range lines {
			fresh := newLineEncoder("thishost")
			fresh.add([]byte(l))
			warm.add([]byte(l))
			if !bytes.Equal(warm.rec, fresh.rec) || !bytes.Equal(warm.res, fresh.res) || !bytes.Equal(warm.scope, fresh.scope) {
				t.Errorf("round %d, line %d %s: the warm encoder made\n%x %x %x\na fresh one\n%x %x %x",
					round, i, l, warm.rec, warm.res, warm.scope, fresh.rec, fresh.res, fresh.scope)
			}
		}
	}
	ld := decode(t, warm.request(nil))
	if ld.LogRecordCount() != 2*len(lines) {
		t.Fatalf("%d records for %d lines", ld.LogRecordCount(), 2*len(lines))
	}
	// Each resource is one group, and every record is under its own.
	seen := map[string]bool{}
	for i := range ld.ResourceLogs().Len() {
		k := fmt.Sprint(ld.ResourceLogs().At(i).Resource().Attributes().AsRaw())
		if seen[k] {
			t.Errorf("resource %s in two groups", k)
		}
		seen[k] = true
	}
}
