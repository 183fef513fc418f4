package daemon

import (
	"log/slog"
	"net"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/ipclab/logagg/internal/metrics"
)

// The metrics endpoint holds at most metricsConns connections: the next
// scraper waits in the backlog (its connect succeeds, nothing reads it)
// instead of taking descriptors the reserve keeps, the wait is counted,
// and it is accepted once one closes.
func TestMetricsEndpointConnectionLimit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(nil)
	const url = "http://test/metrics"
	al := newAdmitListener(ln, url, m, slog.New(slog.DiscardHandler))
	defer al.Close()
	accepted := make(chan net.Conn, metricsConns+1)
	go func() {
		for {
			c, err := al.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var server []net.Conn
	for range metricsConns {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		server = append(server, <-accepted)
	}
	extra, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	select {
	case <-accepted:
		t.Fatalf("accepted connection %d past the limit of %d", metricsConns+1, metricsConns)
	case <-time.After(100 * time.Millisecond):
	}
	paused := func() float64 {
		var pb dto.Metric
		m.AcceptPaused.WithLabelValues(url, metrics.PauseMaxConns).Write(&pb)
		return pb.GetCounter().GetValue()
	}
	server[0].Close()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting connection was not accepted once a slot freed")
	}
	if p := paused(); p <= 0 {
		t.Errorf("accept_paused_seconds_total{cause=max_conns} = %v", p)
	}
}
