package otlp_test

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/otlp/otlptest"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

// TestShortOfDescriptorsWaits: with no descriptor left for the receiver
// (the daemon's reserve aside), a new client is not accepted and dropped
// but waits in the listen backlog, the pause counted; once descriptors
// come back it is served and its record kept. (The conformance suite's
// fds_short_waits writes before it is accepted, which a gRPC client cannot:
// it is not ready until the server's HTTP/2 settings arrive.)
func TestShortOfDescriptorsWaits(t *testing.T) {
	for _, scheme := range []string{"otlp", "otlphttp"} {
		t.Run(scheme, func(t *testing.T) {
			gate, err := transport.NewFDGate(transport.DefaultFDReserve)
			if err != nil {
				t.Fatal(err)
			}
			e := startEnvFDs(t, scheme+"://127.0.0.1:0", options(), gate)
			counter := func(c interface{ Write(*dto.Metric) error }) float64 {
				var m dto.Metric
				c.Write(&m)
				return m.GetCounter().GetValue()
			}
			accepted := e.m.Accepted.WithLabelValues(e.l.URL())
			paused := e.m.AcceptPaused.WithLabelValues(e.l.URL(), metrics.PauseFDs)

			fds := transporttest.NewFDFiller(t)
			fds.Fill()
			fds.Free(1) // the client's socket
			done := make(chan error, 1)
			go func() {
				c, err := otlptest.Dial(e.l.URL())
				if err == nil {
					_, err = c.Write([]byte("waited\n"))
					if cerr := c.Close(); err == nil {
						err = cerr
					}
				}
				done <- err
			}()
			testenv.Eventually(t, 10*time.Second, "the pause counted", func() bool { return counter(paused) > 0 })
			if n := counter(accepted); n != 0 {
				t.Fatalf("accepted %v connections with no descriptor left", n)
			}
			if e.cap.Len() != 0 {
				t.Fatalf("a record arrived with no descriptor left")
			}
			fds.Release()
			if err := <-done; err != nil {
				t.Fatalf("the waiting client: %v", err)
			}
			if recs := e.lines(1); len(recs) != 1 || recs[0]["message"] != "waited" {
				t.Errorf("records %v", recs)
			}
			if n := counter(accepted); n != 1 {
				t.Errorf("accepted %v connections, want 1", n)
			}
		})
	}
}
