package otlp_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ipclab/logagg/internal/otlpwire"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport/otlp"
	"github.com/ipclab/logagg/internal/transport/otlp/otlptest"
)

// TestHTTP2OverTLSBounded: OTLP/HTTP over TLS speaks HTTP/2 to clients
// that ask for it, and tells them the bounds its connections are charged
// for (otlp.HTTP2ConnCost): at most 8 calls at once, a window of 64 KiB.
// net/http's defaults, 250 calls and 1 MiB, let one connection hold far
// more than it was charged.
func TestHTTP2OverTLSBounded(t *testing.T) {
	server, _ := testenv.NewPKI(t, t.TempDir())
	e := startEnv(t, tlsURL(otlp.SchemeHTTP, server, ""), options())
	trusting := &tls.Config{RootCAs: server.CA, MinVersion: tls.VersionTLS12}

	c, err := tls.Dial("tcp", hostPort(e.l.URL()), &tls.Config{RootCAs: server.CA, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q, want h2", p)
	}
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck // a read error fails below
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("first frame %v, want SETTINGS", f.Header())
	}
	if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); !ok || v != 8 {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS %d (%v), want 8", v, ok)
	}
	if v, ok := sf.Value(http2.SettingInitialWindowSize); ok && v > 64<<10 {
		t.Errorf("SETTINGS_INITIAL_WINDOW_SIZE %d, want at most 64 KiB", v)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if wu, ok := f.(*http2.WindowUpdateFrame); ok && wu.StreamID == 0 {
			if 65535+wu.Increment > 64<<10 {
				t.Errorf("connection window %d, want at most 64 KiB", 65535+wu.Increment)
			}
			break
		}
		if _, ok := f.(*http2.SettingsFrame); ok {
			break // no window update: HTTP/2's initial 65,535
		}
	}

	// Calls over HTTP/2, more than the 8 at once: all served.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: trusting, ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "https://"+hostPort(e.l.URL())+"/v1/logs",
				bytes.NewReader(otlptest.Request(fmt.Appendf(nil, "h2 %02d", i))))
			req.Header.Set("Content-Type", "application/x-protobuf")
			resp, err := client.Do(req)
			if err != nil {
				errs <- err
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
				errs <- fmt.Errorf("%s over HTTP/%d", resp.Status, resp.ProtoMajor)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	e.lines(20)
}

// TestGRPCWindowFollowsMaxRequest: a gRPC call's flow-control window, what
// it may send before its handler reads it, is 1 MiB, but never more than
// the listener's max_request (HTTP/2's 64 KiB at least): a call is charged
// its window of max_inflight when its headers arrive, and max_request or
// that 64 KiB in all, so a larger window would let it hold more than it
// was charged.
func TestGRPCWindowFollowsMaxRequest(t *testing.T) {
	for _, c := range []struct {
		query string
		want  uint32
	}{
		{"", 1 << 20},
		{"?max_request=256KiB", 256 << 10},
		{"?max_request=16KiB", 64 << 10},
	} {
		e := startEnv(t, "otlp://127.0.0.1:0"+c.query, options())
		nc, err := net.Dial("tcp", hostPort(e.l.URL()))
		if err != nil {
			t.Fatal(err)
		}
		nc.Write([]byte(http2.ClientPreface)) //nolint:errcheck // a write error fails the read below
		fr := http2.NewFramer(nc, nc)
		fr.WriteSettings()                                   //nolint:errcheck // as above
		nc.SetReadDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck // as above
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		sf, ok := f.(*http2.SettingsFrame)
		if !ok {
			t.Fatalf("%q: first frame %v, want SETTINGS", c.query, f.Header())
		}
		if v, ok := sf.Value(http2.SettingInitialWindowSize); !ok || v != c.want {
			t.Errorf("%q: SETTINGS_INITIAL_WINDOW_SIZE %d (%v), want %d", c.query, v, ok, c.want)
		}
		nc.Close()
	}
}

// TestGRPCSmallMaxRequestChargesTheWindow: with max_request under 64 KiB,
// a gRPC call may still send HTTP/2's 64 KiB window before it is read,
// and is charged that: two calls held open fill max_inflight=128KiB and
// the third is refused for backpressure (charged max_request, eight would
// have been let in).
func TestGRPCSmallMaxRequestChargesTheWindow(t *testing.T) {
	e := startEnv(t, "otlp://127.0.0.1:0?max_request=16KiB&max_inflight=128KiB", options())
	cc, err := grpc.NewClient(hostPort(e.l.URL()), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(otlpwire.Codec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
	for i := range 2 { // their headers only: nothing read, the window's worth charged
		if _, err := cc.NewStream(ctx, desc, otlpwire.ExportPath); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	cs, err := cc.NewStream(ctx, desc, otlpwire.ExportPath)
	if err == nil {
		err = cs.RecvMsg(&otlpwire.Raw{})
	}
	if code := status.Code(err); code != codes.ResourceExhausted {
		t.Fatalf("third call: %v, want RESOURCE_EXHAUSTED", err)
	}
	if v := e.refused(otlp.CauseBackpressure); v != 1 {
		t.Errorf("refused for backpressure: %v, want 1", v)
	}
}
