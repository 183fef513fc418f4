package unixstream_test

import (
	"context"
	"github.com/ipclab/logagg/internal/sink"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/transporttest"
	_ "github.com/ipclab/logagg/internal/transport/unixstream"
)

func sockPath(t *testing.T) string {
	dir, err := os.MkdirTemp("", "lg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s.sock")
}

func run(t *testing.T, o transport.Options) (string, *metrics.Metrics, *transporttest.Capture, func()) {
	t.Helper()
	path := sockPath(t)
	raw := "unix://" + path
	m := metrics.New(nil)
	cap := transporttest.NewCapture()
	l, err := transport.Open(raw, transport.Deps{Root: m, Sink: sink.New(cap, sink.Options{}), Opts: o})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	var stopped bool
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		stopped = true
	}
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	return path, m, cap, stop
}

func value(t *testing.T, m interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Counter != nil {
		return d.GetCounter().GetValue()
	}
	return d.GetGauge().GetValue()
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, what, cond)
}

// TestMaxConns: at MaxConns the listener stops accepting; a client beyond
// the limit waits in the backlog with what it wrote, and its records arrive
// once a slot frees. Nothing it was told was sent is lost.
func TestMaxConns(t *testing.T) {
	o := transport.DefaultOptions()
	o.MaxConns = 2
	path, m, cap, _ := run(t, o)
	raw := "unix://" + path
	var keep []net.Conn
	for range 2 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		keep = append(keep, c)
	}
	poll(t, "2 connections", func() bool { return value(t, m.Connections.WithLabelValues(raw)) == 2 })
	extra, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if _, err := extra.Write([]byte("waiting in the backlog\n")); err != nil {
		t.Fatal(err)
	}
	for _, c := range keep {
		c.Write([]byte("still here\n"))
	}
	poll(t, "records from admitted connections", func() bool { return cap.Len() == 2 })
	if got := value(t, m.Accepted.WithLabelValues(raw)); got != 2 {
		t.Errorf("accepted = %v with the limit reached, want 2", got)
	}
	keep[0].Close() // frees a slot: the waiting client is accepted and read
	poll(t, "the record of the client that waited", func() bool { return cap.Len() == 3 })
	recs, err := cap.Records()
	if err != nil || recs[2].Message != "waiting in the backlog" {
		t.Fatalf("third record %v, %v", recs, err)
	}
	for _, cause := range []string{metrics.CauseDrainTimeout, metrics.CauseKernelOverflow} {
		if got := value(t, m.Dropped.WithLabelValues(raw, cause)); got != 0 {
			t.Errorf("dropped{%s} = %v, want 0", cause, got)
		}
	}
}

// TestIdleTimeout: a silent connection is closed after IdleTimeout and its
// slot freed; an active one is not.
func TestIdleTimeout(t *testing.T) {
	o := transport.DefaultOptions()
	o.IdleTimeout = 300 * time.Millisecond
	path, m, cap, _ := run(t, o)
	raw := "unix://" + path
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("partial line without newline"))
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("idle connection was not closed")
	}
	poll(t, "connections gauge back to 0", func() bool { return value(t, m.Connections.WithLabelValues(raw)) == 0 })
	// The partial line reaches the sink through the sink, after the close.
	poll(t, "the partial line", func() bool { return cap.Len() >= 1 })
	recs, err := cap.Records()
	if err != nil || len(recs) != 1 || !recs[0].HasFlag("partial") {
		t.Fatalf("want the unterminated line kept flagged partial, got %v %v", recs, err)
	}
}

// TestOctetCounting: RFC 6587 frames from a unix stream client.
func TestOctetCounting(t *testing.T) {
	path, _, cap, _ := run(t, transport.DefaultOptions())
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	msg := "<13>1 2024-01-01T00:00:00Z host app 1 - - hello\nworld"
	c.Write([]byte("53 " + msg + "plain line\n"))
	c.Close()
	poll(t, "2 records", func() bool { return cap.Len() == 2 })
	recs, _ := cap.Records()
	if recs[1].Message != "plain line" {
		t.Errorf("record after octet frame = %q", recs[1].Message)
	}
	if recs[0].HasFlag("framing") || recs[0].HasFlag("partial") || recs[0].HasFlag("truncated") {
		t.Errorf("octet frame flagged %v", recs[0].Agg.Flags)
	}
}

// TestRcvBuf: the requested receive buffer is applied to accepted
// connections and the granted size exported.
func TestRcvBuf(t *testing.T) {
	o := transport.DefaultOptions()
	o.RcvBuf = 1 << 20
	path, m, cap, stop := run(t, o)
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("x\n"))
	poll(t, "record", func() bool { return cap.Len() == 1 })
	c.Close()
	if got := value(t, m.RcvBuf.WithLabelValues("unix://"+path)); got < 1<<20 {
		t.Errorf("granted receive buffer %v, want >= %d", got, 1<<20)
	}
	stop()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("socket file left after Run: %v", err)
	}
}
