package otlp_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/otlpwire"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport/otlp"
	"github.com/ipclab/logagg/internal/transport/otlp/otlptest"
)

func bigRequest(tag string, n int) []byte {
	var bodies [][]byte
	for i := range n {
		bodies = append(bodies, fmt.Appendf(nil, "%s %04d %s", tag, i, bytes.Repeat([]byte("p"), 100)))
	}
	return otlptest.Request(bodies...)
}

// export sends req to e's receiver once over scheme's protocol: ok, or
// the retry delay of a refusal for backpressure.
func export(e *env, scheme string, req []byte) (ok bool, retry time.Duration, err error) {
	if scheme == "otlp" {
		cc, err := grpc.NewClient(hostPort(e.l.URL()), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(otlpwire.Codec{})))
		if err != nil {
			return false, 0, err
		}
		defer cc.Close()
		err = cc.Invoke(context.Background(), otlpwire.ExportPath, &otlpwire.Raw{B: req}, &otlpwire.Raw{})
		if status.Code(err) == codes.ResourceExhausted {
			for _, d := range status.Convert(err).Details() {
				if ri, ok := d.(*errdetails.RetryInfo); ok {
					return false, ri.RetryDelay.AsDuration(), nil
				}
			}
		}
		return err == nil, 0, err
	}
	hreq, _ := http.NewRequest(http.MethodPost, "http://"+hostPort(e.l.URL())+"/v1/logs", bytes.NewReader(req))
	hreq.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		return false, 0, err
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		d, _ := time.ParseDuration(resp.Header.Get("Retry-After") + "s")
		return false, d, nil
	}
	if resp.StatusCode != 200 {
		return false, 0, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return true, 0, nil
}

// TestBackpressureRefuses: while the output does not take records, the
// requests admitted wait and the next ones are refused with
// RESOURCE_EXHAUSTED and RetryInfo (gRPC) or 429 and Retry-After (HTTP)
// before anything of them is kept; once the output takes records again,
// the waiting requests succeed. No record is answered with success and
// lost.
func TestBackpressureRefuses(t *testing.T) {
	for _, c := range []struct {
		scheme, query string
		records       int
	}{
		// Requests of ~12 KiB, each holding its length: three fit in
		// 40 KiB, the fourth is refused.
		{"otlphttp", "max_request=16KiB&max_inflight=40KiB", 100},
		// A gRPC call holds 64 KiB until it is read, then its length
		// (~59 KiB): three fit in 200 KiB whether or not the others were
		// read yet, the fourth does not.
		{"otlp", "max_request=64KiB&max_inflight=200KiB", 480},
	} {
		scheme := c.scheme
		t.Run(scheme, func(t *testing.T) {
			e := startEnv(t, scheme+"://127.0.0.1:0?"+c.query, options())
			e.cap.Block()
			send := func(req []byte) (bool, time.Duration, error) { return export(e, scheme, req) }
			if n := len(bigRequest("held0", c.records)); scheme == "otlp" && (n < 46<<10 || n > 64<<10) {
				t.Fatalf("a request of %d bytes: the sizes above do not hold", n)
			}
			var wg sync.WaitGroup
			results := make(chan string, 3)
			for i := range 3 {
				wg.Go(func() {
					ok, _, err := send(bigRequest(fmt.Sprintf("held%d", i), c.records))
					results <- fmt.Sprint(ok, err)
				})
				time.Sleep(20 * time.Millisecond) // in order, for the budget
			}
			testenv.Eventually(t, 10*time.Second, "a request waiting in the hand-over", func() bool { return e.cap.Waiting() > 0 })
			var retry time.Duration
			testenv.Eventually(t, 10*time.Second, "a request refused for backpressure", func() bool {
				ok, d, err := send(bigRequest("refused", c.records))
				if ok || err != nil && d == 0 && e.refused(otlp.CauseBackpressure) == 0 {
					return false
				}
				retry = d
				return d > 0
			})
			if retry != otlp.RetryAfter {
				t.Errorf("retry after %v, want %v", retry, otlp.RetryAfter)
			}
			if e.cap.Len() != 0 {
				t.Fatalf("records written while the output was blocked")
			}
			e.cap.Unblock()
			wg.Wait()
			close(results)
			for r := range results {
				if r != "true <nil>" {
					t.Errorf("a held request ended %s", r)
				}
			}
			recs := e.lines(3 * c.records)
			if len(recs) != 3*c.records {
				t.Errorf("%d records, want the %d of the three accepted requests", len(recs), 3*c.records)
			}
			for _, r := range recs {
				if bytes.HasPrefix([]byte(r["message"].(string)), []byte("refused")) {
					t.Fatalf("a record of a refused request was kept: %v", r["message"])
				}
			}
		})
	}
}

// TestSDKBacksOff: the Go SDK, refused for backpressure (another client's
// requests hold the budget while the output is stuck), waits as told and
// sends again: every record arrives, once.
func TestSDKBacksOff(t *testing.T) {
	e := startEnv(t, "otlp://127.0.0.1:0?max_request=100KiB&max_inflight=200KiB", options())
	e.cap.Block()
	cc, err := grpc.NewClient(hostPort(e.l.URL()), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(otlpwire.Codec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var held sync.WaitGroup
	for i := range 2 {
		held.Go(func() {
			if err := cc.Invoke(context.Background(), otlpwire.ExportPath, &otlpwire.Raw{B: bigRequest(fmt.Sprint("held", i), 600)}, &otlpwire.Raw{}); err != nil {
				t.Errorf("held request: %v", err)
			}
		})
	}
	testenv.Eventually(t, 10*time.Second, "the budget held", func() bool { return e.cap.Waiting() > 0 })
	ctx := context.Background()
	exp, err := otlploggrpc.New(ctx, otlploggrpc.WithEndpoint(hostPort(e.l.URL())), otlploggrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	lp := provider(exp)
	const n = 2000
	emit(lp, n, "backoff")
	testenv.Eventually(t, 20*time.Second, "the SDK refused for backpressure", func() bool { return e.refused(otlp.CauseBackpressure) > 0 })
	e.cap.Unblock()
	held.Wait()
	if err := lp.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	recs := e.lines(n + 1200)
	seen := map[string]int{}
	for _, r := range recs {
		seen[r["message"].(string)]++
	}
	for i := range n {
		if m := fmt.Sprintf("backoff %06d", i); seen[m] != 1 {
			t.Fatalf("%q arrived %d times", m, seen[m])
		}
	}
}

// TestHardStop: a request stuck in the hand-over at the hard stop is
// answered UNAVAILABLE (the client sends it again), and every record of
// it is counted: records in = out + dropped.
func TestHardStop(t *testing.T) {
	e := startEnv(t, "otlp://127.0.0.1:0", options())
	e.cap.Block()
	cc, err := grpc.NewClient(hostPort(e.l.URL()), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(otlpwire.Codec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	errc := make(chan error, 1)
	go func() {
		errc <- cc.Invoke(context.Background(), otlpwire.ExportPath, &otlpwire.Raw{B: bigRequest("hard", 400)}, &otlpwire.Raw{})
	}()
	testenv.Eventually(t, 10*time.Second, "the request held in the hand-over", func() bool { return e.cap.Waiting() > 0 })
	e.cancel()
	e.hardStop()
	if err := <-errc; status.Code(err) != codes.Unavailable {
		t.Errorf("status %v, want UNAVAILABLE", err)
	}
	if err := e.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	read := func(c interface{ Write(*dto.Metric) error }) float64 {
		var m dto.Metric
		c.Write(&m)
		return m.GetCounter().GetValue()
	}
	in := read(e.m.RecordsIn.WithLabelValues(e.l.URL()))
	dropped := read(e.m.Dropped.WithLabelValues(e.l.URL(), metrics.CauseDrainTimeout))
	out := float64(e.cap.Len())
	if in != 400 || in != out+dropped || dropped == 0 {
		t.Errorf("in %v, out %v, dropped %v: want 400 in, all counted", in, out, dropped)
	}
}

// TestAckWritten: with ack=written the reply waits until the records are
// written.
func TestAckWritten(t *testing.T) {
	e := startEnv(t, "otlp://127.0.0.1:0?ack=written", options())
	e.cap.Block()
	c, err := otlptest.Dial(e.l.URL())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		c.Write([]byte("acked\n"))
		done <- c.Close()
	}()
	testenv.Eventually(t, 10*time.Second, "the request held", func() bool { return e.cap.Waiting() > 0 })
	select {
	case err := <-done:
		t.Fatalf("answered (%v) before the record was written", err)
	case <-time.After(100 * time.Millisecond): // a window: a wrong receiver answers within it
	}
	e.cap.Unblock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if e.cap.Len() != 1 {
		t.Errorf("%d records", e.cap.Len())
	}
}

// TestBodiesBeingReceivedAreBounded: clients that announce bodies and send
// them slowly hold max_inflight while they are received, not only once
// they are read: with room for two, the third and later are refused
// (429, RESOURCE_EXHAUSTED) before a byte of their bodies is read, and
// the two that fit still succeed once they finish.
func TestBodiesBeingReceivedAreBounded(t *testing.T) {
	const maxRequest = 256 << 10
	req := bigRequest("slow", 2000) // ~230 KiB
	if len(req) > maxRequest {
		t.Fatalf("request of %d bytes, over max_request", len(req))
	}
	url := fmt.Sprintf("otlphttp://127.0.0.1:0?max_request=%d&max_inflight=%d&timeout=30s", maxRequest, 2*maxRequest)
	e := startEnv(t, url, options())
	// Two clients send their headers and half their bodies, then stall.
	var stalled []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", hostPort(e.l.URL()))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: %d\r\n\r\n", len(req))
		c.Write(req[:len(req)/2])
		stalled = append(stalled, c)
	}
	post := func() int {
		resp, err := http.Post("http://"+hostPort(e.l.URL())+"/v1/logs", "application/x-protobuf", bytes.NewReader(req))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// Once both stalled bodies hold their room, every other request is
	// refused for backpressure.
	testenv.Eventually(t, 20*time.Second, "a request refused while two bodies are being received", func() bool {
		return post() == http.StatusTooManyRequests
	})
	if n := e.refused(otlp.CauseBackpressure); n < 1 {
		t.Fatalf("refused for backpressure %v times, want it counted", n)
	}
	for _, c := range stalled {
		c.Write(req[len(req)/2:])
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Errorf("a stalled request ended %d once sent whole, want 200", resp.StatusCode)
		}
	}
	// Their room is back: the next request fits.
	if code := post(); code != 200 {
		t.Errorf("after the stalled requests ended, a request got %d, want 200", code)
	}
	e.lines(3 * 2000)
}

// TestBodiesHeldBySize: a request's body is held in a buffer of its own
// size class while its records are handed over, counted in
// logagg_memory_bytes{kind="otlp_bodies"}, and given back after: small
// requests after a big one do not each hold the big one's buffer (they did
// when bodies came from one pool of buffers of any size).
func TestBodiesHeldBySize(t *testing.T) {
	for _, scheme := range []string{"otlp", "otlphttp"} {
		t.Run(scheme, func(t *testing.T) {
			e := startEnv(t, scheme+"://127.0.0.1:0?max_request=2MiB&max_inflight=8MiB", options())
			held := func() int64 { return e.m.Memory.Held(metrics.MemOTLPBodies) }
			sendAll := func(reqs ...[]byte) func() {
				var wg sync.WaitGroup
				for _, req := range reqs {
					wg.Go(func() {
						if ok, _, err := export(e, scheme, req); !ok || err != nil {
							t.Errorf("export: ok %v, %v", ok, err)
						}
					})
				}
				return wg.Wait
			}
			e.cap.Block()
			big := bigRequest("big", 8000)
			wait := sendAll(big)
			testenv.Eventually(t, 10*time.Second, "the big request's records handed over", func() bool {
				return e.cap.Waiting() > 0 && held() > 0
			})
			if h := held(); h < int64(len(big)) || h > 2*int64(len(big)) {
				t.Errorf("a %d-byte body held as %d bytes, want between its size and twice it", len(big), h)
			}
			e.cap.Unblock()
			wait()
			// An HTTP handler gives its body back after the reply is sent.
			testenv.Eventually(t, 10*time.Second, "the big body given back", func() bool { return held() == 0 })
			e.cap.Block()
			small := bigRequest("small", 100)
			wait = sendAll(small, small, small)
			testenv.Eventually(t, 10*time.Second, "the small requests' records handed over", func() bool {
				return e.cap.Waiting() > 0 && held() > 0
			})
			if h, most := held(), 3*2*int64(len(small)); h > most {
				t.Errorf("three %d-byte bodies held as %d bytes, want at most %d", len(small), h, most)
			}
			e.cap.Unblock()
			wait()
			testenv.Eventually(t, 10*time.Second, "every body given back", func() bool { return held() == 0 })
		})
	}
}

// Free body buffers are kept for the next request only in the room of
// max_inflight that the bodies being read leave
// (logagg_memory_bytes{kind="otlp_bodies_free"}): a run of requests of
// every size leaves some kept, and at most max_inflight (bufpool's tests
// check that what is lent and kept stays within the limit). A JSON body, turned into protobuf before it is handed over, gives back
// the buffer it was read into.
func TestFreeBodiesKeptWithinMaxInflight(t *testing.T) {
	const maxInflight = 4 << 20
	for _, scheme := range []string{"otlp", "otlphttp"} {
		t.Run(scheme, func(t *testing.T) {
			e := startEnv(t, fmt.Sprintf("%s://127.0.0.1:0?max_request=2MiB&max_inflight=%d", scheme, maxInflight), options())
			held := func() int64 { return e.m.Memory.Held(metrics.MemOTLPBodies) }
			kept := func() int64 { return e.m.Memory.Held(metrics.MemOTLPBodiesFree) }
			// Sizes from 12 KiB to 1.8 MiB: eight size classes, asked in
			// an order that leaves the kept buffers of the wrong class.
			for i, n := range []int{100, 15000, 400, 7000, 200, 3000, 15000, 800, 1600, 100, 7000, 15000} {
				var wg sync.WaitGroup
				for range 2 { // a gRPC call is charged max_request: two fit
					wg.Go(func() {
						if ok, _, err := export(e, scheme, bigRequest(fmt.Sprint("r", i), n)); !ok || err != nil {
							t.Errorf("export %d: ok %v, %v", i, ok, err)
						}
					})
				}
				wg.Wait()
				testenv.Eventually(t, 10*time.Second, "the bodies given back", func() bool { return held() == 0 })
				if k := kept(); k > maxInflight || k <= 0 {
					t.Fatalf("after request %d (%d records ×2): %d bytes kept free, want some and at most max_inflight (%d)", i, n, k, maxInflight)
				}
			}
			if scheme == "otlphttp" {
				js := `{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"json ` + strings.Repeat("j", 5000) + `"}}]}]}]}`
				resp, err := http.Post("http://"+hostPort(e.l.URL())+"/v1/logs", "application/json", strings.NewReader(js))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("JSON export: HTTP %d", resp.StatusCode)
				}
				testenv.Eventually(t, 10*time.Second, "the JSON body given back", func() bool { return held() == 0 })
				if k := kept(); k > maxInflight || k <= 0 {
					t.Errorf("after a JSON request: %d bytes kept free, want some and at most %d", k, maxInflight)
				}
			}
		})
	}
}
