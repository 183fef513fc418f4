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

// The endpoint waits for one more scrape only when losses were not shown
// yet and a scraper comes regularly.
func TestScrapesNext(t *testing.T) {
	s := &scrapes{}
	now := time.Now()
	if done, _ := s.next(now, 5); done != nil {
		t.Error("waiting for a scrape although nobody ever scraped")
	}
	s.last, s.gap = now.Add(-time.Second), 2*time.Second
	if done, _ := s.next(now, 0); done != nil {
		t.Error("waiting for a scrape although nothing was lost")
	}
	s.shown = 5
	if done, _ := s.next(now, 5); done != nil {
		t.Error("waiting for a scrape although the last one showed every loss")
	}
	done, wait := s.next(now, 6)
	if done == nil || wait != 3*time.Second {
		t.Errorf("next: %v %v, want a wait of 1.5 scrape intervals", done, wait)
	}
	s.gap = time.Hour
	if _, wait := s.next(now, 6); wait != maxLinger {
		t.Errorf("wait %v, want at most %v", wait, maxLinger)
	}
	s.last, s.gap = now.Add(-time.Minute), time.Second
	if done, _ := s.next(now, 6); done != nil {
		t.Error("waiting for a scraper that stopped coming")
	}
}
