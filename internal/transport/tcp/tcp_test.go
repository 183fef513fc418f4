package tcp_test

import (
	"context"
	"errors"
	"github.com/ipclab/logagg/internal/sink"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/tcp"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

func TestListenAddr(t *testing.T) {
	for in, want := range map[string]string{
		"tcp://:9000":         "127.0.0.1:9000",
		"tcp://0.0.0.0:9000":  "0.0.0.0:9000",
		"tcp://[::1]:9000":    "[::1]:9000",
		"tcp://127.0.0.2:1/":  "127.0.0.2:1",
		"tcp://localhost:514": "localhost:514",
	} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tcp.ListenAddr(u)
		if err != nil || got != want {
			t.Errorf("ListenAddr(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"tcp://127.0.0.1", "tcp://h:1/path", "tcp:opaque"} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tcp.ListenAddr(u); !errors.Is(err, transport.ErrBadAddress) {
			t.Errorf("ListenAddr(%s) err = %v, want ErrBadAddress", in, err)
		}
	}
}

func TestOpen(t *testing.T) {
	d := transport.Deps{Sink: sink.New(transporttest.NewCapture(), sink.Options{}), Opts: transport.DefaultOptions()}
	l, err := transport.Open("tcp://:0", d)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !strings.HasPrefix(l.URL(), "tcp://127.0.0.1:") || strings.HasSuffix(l.URL(), ":0") {
		t.Errorf("URL() = %q, want the bound loopback port", l.URL())
	}
	for _, bad := range []string{"tcp://nohost:notaport", "tcp://256.1.1.1:9000", "tcp://127.0.0.1:99999"} {
		if l, err := transport.Open(bad, d); !errors.Is(err, transport.ErrBadAddress) {
			if l != nil {
				l.Close()
			}
			t.Errorf("Open(%s) err = %v, want ErrBadAddress", bad, err)
		}
	}
	// The port is taken: a second bind fails with ErrBadAddress too.
	if l2, err := transport.Open(l.URL(), d); !errors.Is(err, transport.ErrBadAddress) {
		if l2 != nil {
			l2.Close()
		}
		t.Errorf("second bind err = %v, want ErrBadAddress", err)
	}
}

// TCP connections keep the kernel's receive-buffer autotuning unless a
// size is asked for with TCPRcvBuf: RcvBuf, which unix sockets and FIFOs
// get (4 MiB by default), must not fix theirs (docs/adr/0045). The granted
// size is exported only when one was set.
func TestRcvBufAutotunedUnlessAsked(t *testing.T) {
	for _, c := range []struct {
		name      string
		tcpRcvBuf int
		wantFixed bool
	}{
		{"default", 0, false},
		{"asked", 1 << 20, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := transport.DefaultOptions()
			if o.RcvBuf == 0 {
				t.Fatal("the default RcvBuf is 0: this test needs one that TCP must ignore")
			}
			o.TCPRcvBuf = c.tcpRcvBuf
			m := metrics.New(nil)
			capture := transporttest.NewCapture()
			l, err := transport.Open("tcp://127.0.0.1:0", transport.Deps{Root: m, Sink: sink.New(capture, sink.Options{}), Opts: o})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- l.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			conn, err := net.Dial("tcp", strings.TrimPrefix(l.URL(), "tcp://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write([]byte("x\n")); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 20*time.Second, "the record", func() bool { return capture.Len() == 1 })
			var d dto.Metric
			if err := m.RcvBuf.WithLabelValues(l.URL()).Write(&d); err != nil {
				t.Fatal(err)
			}
			got := d.GetGauge().GetValue()
			switch {
			case c.wantFixed && got < float64(c.tcpRcvBuf):
				t.Errorf("granted receive buffer %v, want >= %d", got, c.tcpRcvBuf)
			case !c.wantFixed && got != 0:
				t.Errorf("receive buffer fixed at %v although TCPRcvBuf is 0 (RcvBuf %d must not apply to TCP)", got, o.RcvBuf)
			}
		})
	}
}
