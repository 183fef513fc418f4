package otlp_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ipclab/logagg/internal/otlpwire"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport/otlp"
	"github.com/ipclab/logagg/internal/transport/otlp/otlptest"
)

func (e *env) refused(cause string) float64 {
	var m dto.Metric
	e.m.RequestsRefused.WithLabelValues(e.l.URL(), cause).Write(&m)
	return m.GetCounter().GetValue()
}

func (e *env) rejected(cause string) float64 {
	var m dto.Metric
	e.m.RecordsRejected.WithLabelValues(e.l.URL(), cause).Write(&m)
	return m.GetCounter().GetValue()
}

// anyValue wraps AnyValue fields.
func withBody(body []byte) []byte {
	var lr []byte
	lr = protowire.AppendTag(lr, otlpwire.LogBody, protowire.BytesType)
	lr = protowire.AppendBytes(lr, body)
	var sl []byte
	sl = protowire.AppendTag(sl, otlpwire.ScopeLogsLogRecords, protowire.BytesType)
	sl = protowire.AppendBytes(sl, lr)
	var rl []byte
	rl = protowire.AppendTag(rl, otlpwire.ResourceLogsScopeLogs, protowire.BytesType)
	rl = protowire.AppendBytes(rl, sl)
	var req []byte
	req = protowire.AppendTag(req, otlpwire.RequestResourceLogs, protowire.BytesType)
	return protowire.AppendBytes(req, rl)
}

// nested is an AnyValue of depth kvlists, each holding the next.
func nested(depth int) []byte {
	v := protowire.AppendString(protowire.AppendTag(nil, otlpwire.AnyString, protowire.BytesType), "leaf")
	for range depth {
		var kv []byte
		kv = protowire.AppendTag(kv, otlpwire.KeyValueKey, protowire.BytesType)
		kv = protowire.AppendString(kv, "k")
		kv = protowire.AppendTag(kv, otlpwire.KeyValueValue, protowire.BytesType)
		kv = protowire.AppendBytes(kv, v)
		var list []byte
		list = protowire.AppendTag(list, otlpwire.ListValues, protowire.BytesType)
		list = protowire.AppendBytes(list, kv)
		v = protowire.AppendBytes(protowire.AppendTag(nil, otlpwire.AnyKVList, protowire.BytesType), list)
	}
	return v
}

func stringBody(s string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, otlpwire.AnyString, protowire.BytesType), s)
}

type badCase struct {
	name  string
	req   []byte
	cause string // "" = accepted
}

func badRequests() []badCase {
	big := strings.Repeat("x", 2000)
	two := otlptest.Request([]byte("keep 1"), []byte(big), []byte("keep 2"))
	return []badCase{
		{"malformed", []byte{0x0a, 0xff, 0x01}, otlp.CauseMalformed},
		{"invalid_utf8", withBody(stringBody("bad \xff\xfe utf8")), otlp.CauseInvalidUTF8},
		{"too_deep", withBody(nested(100)), otlp.CauseTooDeep},
		{"trace_id_length", append(withBody(stringBody("x"))[:0:0], func() []byte {
			var lr []byte
			lr = protowire.AppendTag(lr, otlpwire.LogTraceID, protowire.BytesType)
			lr = protowire.AppendBytes(lr, []byte{1, 2, 3})
			var sl []byte
			sl = protowire.AppendTag(sl, otlpwire.ScopeLogsLogRecords, protowire.BytesType)
			sl = protowire.AppendBytes(sl, lr)
			var rl []byte
			rl = protowire.AppendTag(rl, otlpwire.ResourceLogsScopeLogs, protowire.BytesType)
			rl = protowire.AppendBytes(rl, sl)
			return protowire.AppendBytes(protowire.AppendTag(nil, otlpwire.RequestResourceLogs, protowire.BytesType), rl)
		}()...), otlp.CauseBadID},
		{"too_large", otlptest.Request(bytes.Repeat([]byte("y"), 70<<10)), otlp.CauseTooLarge},
		{"record_over_max_record", two, ""},
	}
}

// TestBadInputGRPC: each bad request is refused with the status OTLP
// clients act on, counted with its cause, and the receiver goes on
// serving.
func TestBadInputGRPC(t *testing.T) {
	o := options()
	o.MaxRecord = 1024
	e := startEnv(t, "otlp://127.0.0.1:0?max_request=64KiB&timeout=300ms", o)
	cc, err := grpc.NewClient(hostPort(e.l.URL()), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(otlpwire.Codec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for _, c := range badRequests() {
		t.Run(c.name, func(t *testing.T) {
			before := e.refused(c.cause)
			var resp otlpwire.Raw
			err := cc.Invoke(context.Background(), otlpwire.ExportPath, &otlpwire.Raw{B: c.req}, &resp)
			if c.cause == "" {
				if err != nil {
					t.Fatal(err)
				}
				rej, msg, perr := otlpwire.ParseResponse(resp.B)
				if perr != nil || rej != 1 || !strings.Contains(msg, "max_record") {
					t.Errorf("partial success: %d %q %v", rej, msg, perr)
				}
				if got := e.rejected(otlp.CauseRecordSize); got != 1 {
					t.Errorf("records_rejected_total{record_size} = %v", got)
				}
				return
			}
			want := codes.InvalidArgument
			if c.cause == otlp.CauseTooLarge {
				want = codes.ResourceExhausted
			}
			if status.Code(err) != want {
				t.Errorf("status %v, want %v", err, want)
			}
			for _, d := range status.Convert(err).Details() {
				if _, ok := d.(*errdetails.RetryInfo); ok {
					t.Errorf("RetryInfo on a request that would fail again: %v", err)
				}
			}
			if got := e.refused(c.cause); got != before+1 {
				t.Errorf("requests_refused_total{%s} = %v, want %v", c.cause, got, before+1)
			}
		})
	}
	t.Run("slow_client", func(t *testing.T) {
		slowGRPC(t, hostPort(e.l.URL()))
		testenv.Eventually(t, 10*time.Second, "the slow request counted", func() bool { return e.refused(otlp.CauseTimeout) == 1 })
	})
	t.Run("unknown_method", func(t *testing.T) {
		err := cc.Invoke(context.Background(), "/opentelemetry.proto.collector.trace.v1.TraceService/Export", &otlpwire.Raw{}, &otlpwire.Raw{})
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("status %v", err)
		}
	})
	// Everyone else is still served.
	if err := cc.Invoke(context.Background(), otlpwire.ExportPath, &otlpwire.Raw{B: otlptest.Request([]byte("after"))}, &otlpwire.Raw{}); err != nil {
		t.Fatal(err)
	}
	recs := e.lines(3)
	if len(recs) != 3 || recs[2]["message"] != "after" {
		t.Errorf("records %v", recs)
	}
}

// slowGRPC opens an Export call by hand, sends part of its message and
// waits for the receiver to give up on it.
func slowGRPC(t *testing.T, addr string) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write([]byte(http2.ClientPreface))
	fr := http2.NewFramer(nc, nc)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", otlpwire.ExportPath}, {":authority", "x"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	fr.WriteData(1, false, []byte{0, 0, 0, 0, 100, 1, 2, 3}) // a 100-byte message, 3 bytes of it
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no answer to the slow request: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			fields, _ := dec.DecodeFull(f.HeaderBlockFragment())
			for _, hf := range fields {
				if hf.Name == "grpc-status" {
					if hf.Value != fmt.Sprint(int(codes.DeadlineExceeded)) {
						t.Errorf("grpc-status %s, want DEADLINE_EXCEEDED", hf.Value)
					}
					return
				}
			}
		case *http2.RSTStreamFrame:
			return
		}
	}
}

func gz(b []byte) []byte {
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	w.Write(b)
	w.Close()
	return out.Bytes()
}

// TestBadInputHTTP: as TestBadInputGRPC, with HTTP's answers.
func TestBadInputHTTP(t *testing.T) {
	o := options()
	o.MaxRecord = 1024
	e := startEnv(t, "otlphttp://127.0.0.1:0?max_request=64KiB&timeout=300ms", o)
	base := "http://" + hostPort(e.l.URL())
	post := func(path, ctype, cenc string, body []byte) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		if cenc != "" {
			req.Header.Set("Content-Encoding", cenc)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	const pb, js = "application/x-protobuf", "application/json"
	deepJSON := `{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":` + strings.Repeat(`{"arrayValue":{"values":[`, 60) + `{"stringValue":"x"}` + strings.Repeat(`]}}`, 60) + `}]}]}]}`
	cases := []struct {
		name              string
		path, ctype, cenc string
		body              []byte
		code              int
		cause             string
	}{
		{"malformed_protobuf", "/v1/logs", pb, "", []byte{0x0a, 0xff}, 400, otlp.CauseMalformed},
		{"malformed_json", "/v1/logs", js, "", []byte(`{"resourceLogs":[{`), 400, otlp.CauseMalformed},
		{"invalid_utf8_protobuf", "/v1/logs", pb, "", withBody(stringBody("\xff")), 400, otlp.CauseInvalidUTF8},
		{"invalid_utf8_json", "/v1/logs", js, "", []byte("{\"resourceLogs\":[{\"scopeLogs\":[{\"logRecords\":[{\"body\":{\"stringValue\":\"\xff\"}}]}]}]}"), 400, otlp.CauseInvalidUTF8},
		{"too_deep_protobuf", "/v1/logs", pb, "", withBody(nested(100)), 400, otlp.CauseTooDeep},
		{"too_deep_json", "/v1/logs", js, "", []byte(deepJSON), 400, otlp.CauseTooDeep},
		{"too_large", "/v1/logs", pb, "", otlptest.Request(bytes.Repeat([]byte("y"), 70<<10)), 413, otlp.CauseTooLarge},
		{"gzip_bomb", "/v1/logs", pb, "gzip", gz(otlptest.Request(bytes.Repeat([]byte("y"), 1<<20))), 413, otlp.CauseTooLarge},
		{"bad_gzip", "/v1/logs", pb, "gzip", []byte("not gzip at all"), 400, otlp.CauseEncoding},
		{"unknown_encoding", "/v1/logs", pb, "br", []byte("x"), 415, otlp.CauseEncoding},
		{"wrong_content_type", "/v1/logs", "text/plain", "", []byte("hello"), 415, otlp.CauseContentType},
		{"wrong_path", "/v1/traces", pb, "", otlptest.Request([]byte("x")), 404, otlp.CauseMethod},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.refused(c.cause)
			resp := post(c.path, c.ctype, c.cenc, c.body)
			if resp.StatusCode != c.code {
				t.Errorf("HTTP %d, want %d", resp.StatusCode, c.code)
			}
			if got := e.refused(c.cause); got != before+1 {
				t.Errorf("requests_refused_total{%s} = %v, want %v", c.cause, got, before+1)
			}
		})
	}
	t.Run("get", func(t *testing.T) {
		resp, err := http.Get(base + "/v1/logs")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 {
			t.Errorf("HTTP %d", resp.StatusCode)
		}
	})
	t.Run("record_over_max_record", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/logs", bytes.NewReader(otlptest.Request([]byte("keep 1"), bytes.Repeat([]byte("z"), 2000), []byte("keep 2"))))
		req.Header.Set("Content-Type", pb)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		rej, msg, err := otlpwire.ParseResponse(b)
		if resp.StatusCode != 200 || err != nil || rej != 1 || !strings.Contains(msg, "max_record") {
			t.Errorf("HTTP %d, partial success %d %q %v", resp.StatusCode, rej, msg, err)
		}
	})
	t.Run("slow_client", func(t *testing.T) {
		nc, err := net.Dial("tcp", hostPort(e.l.URL()))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		fmt.Fprintf(nc, "POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: 1000\r\n\r\n0123456789")
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(nc)
		if !bytes.HasPrefix(b, []byte("HTTP/1.1 408")) {
			t.Errorf("answer %q, want 408", b[:min(len(b), 40)])
		}
		if got := e.refused(otlp.CauseTimeout); got != 1 {
			t.Errorf("requests_refused_total{timeout} = %v", got)
		}
	})
	if resp := post("/v1/logs", js, "", []byte(`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"after"}}]}]}]}`)); resp.StatusCode != 200 {
		t.Fatalf("a good request after the bad ones: HTTP %d", resp.StatusCode)
	}
	recs := e.lines(3)
	if recs[len(recs)-1]["message"] != "after" {
		t.Errorf("records %v", recs)
	}
}
