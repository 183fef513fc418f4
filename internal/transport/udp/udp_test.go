package udp_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/ipclab/logagg/internal/sink"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/dgram/dgramtest"
	"github.com/ipclab/logagg/internal/transport/udp"
)

type running struct {
	raw    string
	l      transport.Listener
	m      *metrics.Metrics
	sink   *dgramtest.Sink
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, raw string, o transport.Options) *running {
	t.Helper()
	r := &running{raw: raw, sink: dgramtest.NewSink(), m: metrics.New(prometheus.NewRegistry()), done: make(chan error, 1)}
	l, err := transport.Open(raw, transport.Deps{Root: r.m, Sink: sink.New(r.sink, sink.Options{}), Opts: o})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	r.l = l
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- l.Run(ctx) }()
	t.Cleanup(func() { r.sink.Release(); r.stop(t) })
	return r
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	if r.done == nil {
		return
	}
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	r.done = nil
}

func (r *running) addr(t *testing.T) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(strings.TrimPrefix(r.l.URL(), "udp://"))
	if err != nil {
		t.Fatalf("URL() %q: %v", r.l.URL(), err)
	}
	return ap
}

func TestEmptyHostIsLoopbackAndPortReported(t *testing.T) {
	r := start(t, "udp://:0", transport.DefaultOptions())
	ap := r.addr(t)
	if ap.Addr() != netip.MustParseAddr("127.0.0.1") || ap.Port() == 0 {
		t.Fatalf("URL() = %q, want 127.0.0.1 and the real port", r.l.URL())
	}
}

func TestDeliveryWithSourceAddr(t *testing.T) {
	leaks := dgramtest.Snapshot(t)
	r := start(t, "udp://127.0.0.1:0", transport.DefaultOptions())
	var senders []net.Conn
	for range 2 {
		c, err := net.Dial("udp", r.addr(t).String())
		if err != nil {
			t.Fatal(err)
		}
		senders = append(senders, c)
	}
	const n = 200 // small enough for the default receive buffer: no loss
	for i := range n {
		fmt.Fprintf(senders[i%2], "\x1erec %03d\n\x1esecond %03d\n", i, i)
	}
	r.sink.WaitLen(t, 2*n, 10*time.Second)
	for i, rec := range r.sink.Records(t) {
		want := fmt.Sprintf("rec %03d", i/2)
		if i%2 == 1 {
			want = fmt.Sprintf("second %03d", i/2)
		}
		if rec.Message != want {
			t.Fatalf("record %d = %q, want %q", i, rec.Message, want)
		}
		// The sender is this process on loopback: the /proc lookup must
		// find it (agg.peer.via "lookup").
		if from := senders[(i/2)%2].LocalAddr().String(); rec.Agg.Peer == nil || rec.Agg.Peer.Addr != from ||
			rec.Agg.Peer.PID == nil || int(*rec.Agg.Peer.PID) != os.Getpid() || rec.Agg.Peer.Via != "lookup" {
			t.Fatalf("record %d peer %+v, want addr %s, pid %d via lookup", i, rec.Agg.Peer, from, os.Getpid())
		}
	}
	for _, c := range senders {
		c.Close()
	}
	r.stop(t)
	leaks.Check(t)
}

func TestBadAddress(t *testing.T) {
	for _, raw := range []string{"udp://127.0.0.1", "udp://127.0.0.1:notaport", "udp://127.0.0.1:70000",
		"udp://no-such-host.invalid:9", "udp://127.0.0.1:0/path", "udp:opaque", "udp://192.0.2.1:0"} {
		l, err := transport.Open(raw, transport.Deps{Root: metrics.New(nil), Sink: sink.New(dgramtest.NewSink(), sink.Options{})})
		if err == nil {
			l.Close()
		}
		if !errors.Is(err, transport.ErrBadAddress) {
			t.Errorf("Open(%q) err = %v, want ErrBadAddress", raw, err)
		}
	}
	// A port in use is an address we cannot use either.
	r := start(t, "udp://127.0.0.1:0", transport.DefaultOptions())
	if _, err := transport.Open(r.l.URL(), transport.Deps{Root: metrics.New(nil), Sink: sink.New(dgramtest.NewSink(), sink.Options{})}); !errors.Is(err, transport.ErrBadAddress) {
		t.Errorf("second bind of %s: err = %v, want ErrBadAddress", r.l.URL(), err)
	}
}

// With the pipeline blocked and a tiny receive buffer, a flood overflows
// the socket. Every datagram is either delivered or counted as dropped.
func TestKernelDropsCounted(t *testing.T) {
	o := transport.DefaultOptions()
	o.RcvBuf = 4096
	r := start(t, "udp://127.0.0.1:0", o)
	ap := r.addr(t)
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	to := &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	payload := []byte(strings.Repeat("f", 200))

	r.sink.Block()
	if err := unix.Sendto(fd, []byte("first"), 0, to); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.sink.Waiting(): // the receiver is stuck in Submit, not reading
	case <-time.After(10 * time.Second):
		t.Fatal("receiver never submitted")
	}
	sent := 1
	for range 3000 {
		switch err := unix.Sendto(fd, payload, 0, to); {
		case err == nil:
			sent++
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOBUFS):
			// not sent: not ours to count
		default:
			t.Fatal(err)
		}
	}
	r.sink.Release()

	dropped := func() int {
		return int(testutil.ToFloat64(r.m.Dropped.WithLabelValues(r.l.URL(), metrics.CauseKernelOverflow)))
	}
	testenv.Poll(t, 20*time.Second, "delivered + dropped = sent", func() (string, bool) {
		return fmt.Sprintf("delivered %d + dropped %d < sent %d", r.sink.Len(), dropped(), sent), r.sink.Len()+dropped() >= sent
	})
	s := r.l.(*udp.Listener).Stats()
	t.Logf("sent %d, delivered %d, dropped %d (rcvbuf granted %d, forced %v)", sent, r.sink.Len(), dropped(), s.RcvBuf, s.Forced)
	if dropped() == 0 {
		t.Fatalf("no drops counted: the flood of %d did not overflow a %d-byte buffer?", sent, s.RcvBuf)
	}
	r.stop(t)
	if got := r.sink.Len() + dropped(); got != sent {
		t.Errorf("delivered %d + dropped %d = %d, sent %d", r.sink.Len(), dropped(), got, sent)
	}
	if got := int(testutil.ToFloat64(r.m.RecordsIn.WithLabelValues(r.l.URL()))); got != r.sink.Len() {
		t.Errorf("records_in_total %d, delivered %d", got, r.sink.Len())
	}
}

func TestShutdownDrainsQueued(t *testing.T) {
	o := transport.DefaultOptions()
	o.RcvBuf = 1 << 20
	r := start(t, "udp://127.0.0.1:0", o)
	c, err := net.Dial("udp", r.addr(t).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r.sink.Block()
	fmt.Fprint(c, "first")
	select {
	case <-r.sink.Waiting():
	case <-time.After(10 * time.Second):
		t.Fatal("receiver never submitted")
	}
	const queued = 300 // 300 * ~1 KiB truesize fits in 2 MiB
	for i := range queued {
		fmt.Fprintf(c, "q %d", i)
	}
	r.cancel()
	// The cancel must reach the receiver (on its own event loop) while
	// Submit is blocked: Run's goroutine wakes and waits for the loop to
	// drop the socket.
	testenv.Eventually(t, 10*time.Second, "Run waiting for the loop to drop the socket", func() bool {
		return testenv.Blocked("dgram.(*Receiver).serveOnLoop", "chan receive") > 0
	})
	r.sink.Release()
	r.stop(t)
	if n := r.sink.Len(); n != queued+1 {
		t.Fatalf("delivered %d after shutdown, want %d", n, queued+1)
	}
}

// TestMain: LOGAGG_UDP_SENDER=SRCPORT,DST makes the test binary a sender
// helper: it binds 127.0.0.1:SRCPORT, says "ready", then sends one datagram
// per "send" line on stdin (answering "sent") until stdin closes.
func TestMain(m *testing.M) {
	if spec := os.Getenv("LOGAGG_UDP_SENDER"); spec != "" {
		os.Exit(udpSender(spec))
	}
	os.Exit(m.Run())
}

func udpSender(spec string) int {
	port, dst, _ := strings.Cut(spec, ",")
	laddr, err := net.ResolveUDPAddr("udp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	raddr, err := net.ResolveUDPAddr("udp", dst)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	c, err := net.DialUDP("udp", laddr, raddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer c.Close()
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for n := 0; in.Scan(); n++ {
		fmt.Fprintf(c, "from uid %d pid %d, datagram %d", os.Getuid(), os.Getpid(), n)
		fmt.Println("sent")
	}
	return 0
}

// Two users take turns on one source port (root, nobody, root, ...), each
// sending two datagrams and closing. A record may name a process only if
// that process sent it: never the previous owner of the port. The second
// datagram of each turn, sent once the first was recorded, must name its
// sender (identity is absent only where it could be wrong).
func TestIdentityFollowsThePortsOwner(t *testing.T) {
	nobody := testenv.AsNobody(t)
	r := start(t, "udp://127.0.0.1:0", transport.DefaultOptions())
	probe, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	port := probe.LocalAddr().(*net.UDPAddr).Port
	probe.Close()
	env := fmt.Sprintf("LOGAGG_UDP_SENDER=%d,%s", port, r.addr(t))
	total := 0
	for turn := range 6 {
		cmd, uid := exec.Command(os.Args[0], "-test.run=^$"), uint32(0)
		cmd.Env = append(os.Environ(), env)
		if turn%2 == 1 {
			cmd, uid = nobody.Command(env), testenv.Nobody
		}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		out := bufio.NewReader(stdout)
		if line, _ := out.ReadString('\n'); line != "ready\n" {
			t.Fatalf("turn %d: sender not ready: %q", turn, line)
		}
		for k := range 2 {
			fmt.Fprintln(stdin, "send")
			if line, _ := out.ReadString('\n'); line != "sent\n" {
				t.Fatalf("turn %d: sender: %q", turn, line)
			}
			total++
			r.sink.WaitLen(t, total, 10*time.Second)
			rec := r.sink.Records(t)[total-1]
			want := fmt.Sprintf("from uid %d pid %d, datagram %d", uid, cmd.Process.Pid, k)
			if rec.Message != want {
				t.Fatalf("turn %d: record %q, want %q", turn, rec.Message, want)
			}
			p := rec.Agg.Peer
			if p == nil {
				t.Fatalf("turn %d datagram %d: no peer at all", turn, k)
			}
			if p.PID != nil && (int(*p.PID) != cmd.Process.Pid || p.UID == nil || *p.UID != uid) {
				t.Errorf("turn %d datagram %d (%s): names pid %d uid %v, not its sender (pid %d uid %d)",
					turn, k, p.Addr, *p.PID, derefU(p.UID), cmd.Process.Pid, uid)
			}
			if k == 1 && p.PID == nil {
				t.Errorf("turn %d datagram %d: no identity for a sender known since the previous datagram", turn, k)
			}
		}
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("turn %d: sender: %v", turn, err)
		}
	}
}

func derefU(p *uint32) any {
	if p == nil {
		return nil
	}
	return *p
}
