package dgram

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/dgram/dgramtest"
)

// TestDropsFromRxqOvfl checks the SO_RXQ_OVFL path alone (the SO_MEMINFO
// reconciliation is switched off): the counter rides on the next datagram
// queued after the drops.
func TestDropsFromRxqOvfl(t *testing.T) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	held := dgramtest.NewSink()
	m := metrics.New(prometheus.NewRegistry())
	const name = "udp-test"
	opts := transport.DefaultOptions()
	opts.RcvBuf = 4096
	rx, err := New(Config{Conn: conn, Deps: transport.Deps{Sink: sink.New(held, sink.Options{}), Metrics: m.ForListener(name), Opts: opts},
		Meta: record.Meta{Transport: "udp", Listener: name}, SourceAddr: true, MaxDatagram: 65535})
	if err != nil {
		t.Fatal(err)
	}
	rx.noMeminfo = true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rx.Run(ctx) }()
	defer func() {
		held.Release()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	to := &unix.SockaddrInet4{Port: conn.LocalAddr().(*net.UDPAddr).Port, Addr: [4]byte{127, 0, 0, 1}}
	sendOK := func(p []byte) bool {
		err := unix.Sendto(fd, p, 0, to)
		if err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.ENOBUFS) {
			t.Fatal(err)
		}
		return err == nil
	}
	held.Block()
	sendOK([]byte("first"))
	select {
	case <-held.Waiting():
	case <-time.After(10 * time.Second):
		t.Fatal("receiver never submitted")
	}
	sent := 1
	payload := []byte(strings.Repeat("f", 200))
	for range 2000 {
		if sendOK(payload) {
			sent++
		}
	}
	held.Release()
	dropped := func() int {
		return int(testutil.ToFloat64(m.Dropped.WithLabelValues(name, metrics.CauseKernelOverflow)))
	}
	// Sentinels until one is queued after the drops and carries the count.
	testenv.Poll(t, 20*time.Second, "delivered + dropped = sent", func() (string, bool) {
		if held.Len()+dropped() >= sent {
			return "", true
		}
		if sendOK([]byte("sentinel")) {
			sent++
		}
		return fmt.Sprintf("delivered %d + dropped %d < sent %d", held.Len(), dropped(), sent), false
	})
	if dropped() == 0 || rx.Stats().Drops != uint64(dropped()) {
		t.Fatalf("dropped metric %d, stats %d", dropped(), rx.Stats().Drops)
	}
	if got := held.Len() + dropped(); got != sent {
		t.Errorf("delivered %d + dropped %d = %d, sent %d", held.Len(), dropped(), got, sent)
	}
}

func TestNoteDropsOutOfOrder(t *testing.T) {
	r := &Receiver{lastDrops: 10}
	for _, v := range []uint32{12, 11, 12, 20, 15} {
		r.noteDrops(v)
	}
	if r.pendingDrops != 10 || r.lastDrops != 20 {
		t.Errorf("pending %d last %d, want 10 and 20", r.pendingDrops, r.lastDrops)
	}
	r = &Receiver{lastDrops: ^uint32(0) - 1} // the kernel counter wraps
	r.noteDrops(3)
	if r.pendingDrops != 5 {
		t.Errorf("across wrap: pending %d, want 5", r.pendingDrops)
	}
}
