package tcp_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

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
	d := transport.Deps{Out: transporttest.NewCapture(), Opts: transport.DefaultOptions()}
	l, err := transport.Open("tcp://:0", nil, d)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !strings.HasPrefix(l.URL(), "tcp://127.0.0.1:") || strings.HasSuffix(l.URL(), ":0") {
		t.Errorf("URL() = %q, want the bound loopback port", l.URL())
	}
	for _, bad := range []string{"tcp://nohost:notaport", "tcp://256.1.1.1:9000", "tcp://127.0.0.1:99999"} {
		if l, err := transport.Open(bad, nil, d); !errors.Is(err, transport.ErrBadAddress) {
			if l != nil {
				l.Close()
			}
			t.Errorf("Open(%s) err = %v, want ErrBadAddress", bad, err)
		}
	}
	// The port is taken: a second bind fails with ErrBadAddress too.
	if l2, err := transport.Open(l.URL(), nil, d); !errors.Is(err, transport.ErrBadAddress) {
		if l2 != nil {
			l2.Close()
		}
		t.Errorf("second bind err = %v, want ErrBadAddress", err)
	}
}
