package dgram

import (
	"context"
	"github.com/ipclab/logagg/internal/sink"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/dgram/dgramtest"
)

// rig is a Receiver on a bound unix datagram socket and a sender.
type rig struct {
	rx     *Receiver
	sink   *dgramtest.Sink
	m      *metrics.Metrics
	name   string
	path   string
	send   *net.UnixConn
	cancel context.CancelFunc
	done   chan error
}

func newRig(t *testing.T, opts transport.Options, batchBytes int) *rig {
	t.Helper()
	return newRigMode(t, opts, batchBytes, false)
}

// newRigMode is newRig with the receiver detached from the netpoller or not.
func newRigMode(t *testing.T, opts transport.Options, batchBytes int, detach bool) *rig {
	t.Helper()
	dir, err := os.MkdirTemp("", "lg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "d.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{sink: dgramtest.NewSink(), m: metrics.New(prometheus.NewRegistry()), name: "unixgram://" + path, path: path}
	r.rx, err = New(Config{
		Conn:   conn,
		Deps:   transport.Deps{Sink: sink.New(r.sink, sink.Options{BatchBytes: batchBytes}), Metrics: r.m.ForListener(r.name), Opts: opts},
		Meta:   record.Meta{Transport: "unixgram", Listener: r.name},
		Creds:  true,
		Detach: detach,
	})
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	if (r.rx.detached != nil) != detach {
		t.Fatalf("receiver detached: %v, want %v", r.rx.detached != nil, detach)
	}
	r.send, err = net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() { r.done <- r.rx.Run(ctx) }()
	t.Cleanup(func() { r.stop(t); r.send.Close() })
	return r
}

func (r *rig) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		r.done <- nil // let a second stop return at once
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func (r *rig) write(t *testing.T, p string) {
	t.Helper()
	if _, err := r.send.Write([]byte(p)); err != nil {
		t.Fatal(err)
	}
}

func TestFraming(t *testing.T) {
	opts := transport.DefaultOptions()
	opts.MaxRecord = 16
	r := newRig(t, opts, 0)
	type want struct {
		msg   string
		flags string
	}
	cases := []struct {
		in   string
		want []want
	}{
		{"plain", []want{{"plain", ""}}},
		{"one\n", []want{{"one", ""}}},
		{"nul\x00", []want{{"nul", ""}}},
		{"a\nb\n\nc", []want{{"a\nb\n\nc", ""}}}, // one datagram, one record
		{"\n", nil},
		{"", nil},
		{"\x1ea\n\x1eb\n\x1e\n", []want{{"a", ""}, {"b", ""}}},
		{"0123456789abcdefXYZ", []want{{"0123456789abcdef", "truncated"}}},
		{"exactly16bytes!!", []want{{"exactly16bytes!!", ""}}},
		{"\x1ehead\n\x1e0123456789", []want{{"head", ""}, {"012345678", "truncated"}}},
	}
	total := 0
	for _, c := range cases {
		r.write(t, c.in)
		total += len(c.want)
	}
	r.write(t, "end")
	r.sink.WaitLen(t, total+1, 10*time.Second)
	recs := r.sink.Records(t)
	i := 0
	for _, c := range cases {
		for _, w := range c.want {
			got := recs[i]
			i++
			if got.Message != w.msg || strings.Join(got.Agg.Flags, ",") != w.flags {
				t.Errorf("datagram %q: got message %q flags %v, want %q flags %q", c.in, got.Message, got.Agg.Flags, w.msg, w.flags)
			}
		}
	}
	if recs[i].Message != "end" {
		t.Errorf("last record %q, want end", recs[i].Message)
	}
	l := r.m.ForListener(r.name)
	if got := testutil.ToFloat64(l.RecordsIn); int(got) != total+1 {
		t.Errorf("records_in_total = %v, want %d", got, total+1)
	}
	if got := testutil.ToFloat64(r.m.DecodeErrors.WithLabelValues(r.name, metrics.KindTruncated)); got != 2 {
		t.Errorf("decode_errors_total{truncated} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(r.m.Formats.WithLabelValues(r.name, "raw")); int(got) != total+1 {
		t.Errorf("records_by_format_total{raw} = %v, want %d", got, total+1)
	}
	// bytes_in counts whole datagrams; what the kernel cut off is dropped.
	wantBytes, wantCut := len("end"), 0
	for _, c := range cases {
		wantBytes += len(c.in)
		wantCut += max(0, len(c.in)-16)
	}
	if got := testutil.ToFloat64(l.BytesIn); int(got) != wantBytes {
		t.Errorf("bytes_in_total = %v, want %d", got, wantBytes)
	}
	if got := testutil.ToFloat64(r.m.DroppedBytes.WithLabelValues(r.name, metrics.CauseOversize)); int(got) != wantCut {
		t.Errorf("dropped_bytes_total{oversize} = %v, want %d", got, wantCut)
	}
	if s := r.rx.Stats(); s.Truncated != 2 || s.Slot != 16 {
		t.Errorf("stats %+v: want 2 truncated, slot 16", s)
	}
}

func TestCredsAndMeta(t *testing.T) {
	r := newRig(t, transport.DefaultOptions(), 0)
	r.write(t, "hello")
	r.sink.WaitLen(t, 1, 10*time.Second)
	got := r.sink.Records(t)[0]
	p := got.Agg.Peer
	if p == nil || p.PID == nil || int(*p.PID) != os.Getpid() || *p.UID != uint32(os.Getuid()) || *p.GID != uint32(os.Getgid()) || p.Via != "kernel" {
		t.Fatalf("peer = %+v, want pid %d uid %d gid %d via kernel", p, os.Getpid(), os.Getuid(), os.Getgid())
	}
	if got.Agg.Transport != "unixgram" || got.Agg.Listener != r.name || got.Agg.RecvNS == 0 {
		t.Errorf("agg = %+v", got.Agg)
	}
}

// A sender may pass descriptors with SCM_RIGHTS; they must not pile up in
// the aggregator.
func TestSCMRightsClosed(t *testing.T) {
	r := newRig(t, transport.DefaultOptions(), 0)
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	leaks := dgramtest.Snapshot(t)
	for i := 0; i < 5; i++ {
		rc, err := r.send.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.Sendmsg(int(fd), []byte("with fd"), unix.UnixRights(int(f.Fd())), nil, 0)
		}); err != nil || serr != nil {
			t.Fatal(err, serr)
		}
	}
	r.sink.WaitLen(t, 5, 10*time.Second)
	if s := r.rx.Stats(); s.FDsClosed != 5 {
		t.Errorf("closed %d received fds, want 5", s.FDsClosed)
	}
	leaks.Check(t)
	if m := r.sink.Records(t)[0].Message; m != "with fd" {
		t.Errorf("message %q", m)
	}
}

func TestBatchBytesSplitsBatches(t *testing.T) {
	r := newRig(t, transport.DefaultOptions(), 1) // every record fills a batch
	r.write(t, strings.Repeat("\x1ex\n", 20))
	r.sink.WaitLen(t, 20, 10*time.Second)
	if b := r.sink.Batches(); b != 20 {
		t.Errorf("%d batches for 20 records with BatchBytes=1, want 20", b)
	}
}

func TestRcvBufGranted(t *testing.T) {
	opts := transport.DefaultOptions()
	opts.RcvBuf = 1 << 20
	r := newRig(t, opts, 0)
	s := r.rx.Stats()
	// The kernel doubles the value; above rmem_max only SO_RCVBUFFORCE (root) gets it.
	if os.Geteuid() == 0 && (!s.Forced || s.RcvBuf != 2<<20) {
		t.Errorf("as root: granted %d forced=%v, want %d forced", s.RcvBuf, s.Forced, 2<<20)
	}
	if got := testutil.ToFloat64(r.m.ForListener(r.name).RcvBuf); int(got) != s.RcvBuf || got == 0 {
		t.Errorf("socket_receive_buffer_bytes = %v, want %d", got, s.RcvBuf)
	}
}

// Shutdown drains what the kernel queued while Submit was blocked.
func TestShutdownDrains(t *testing.T) {
	for _, detach := range []bool{false, true} {
		t.Run(map[bool]string{false: "netpoll", true: "detached"}[detach], func(t *testing.T) { shutdownDrains(t, detach) })
	}
}

func shutdownDrains(t *testing.T, detach bool) {
	r := newRigMode(t, transport.DefaultOptions(), 0, detach)
	r.sink.Block()
	r.write(t, "first")
	select {
	case <-r.sink.Waiting():
	case <-time.After(10 * time.Second):
		t.Fatal("receiver never submitted")
	}
	// The receiver is stuck in Submit; these wait in the kernel queue
	// (max_dgram_qlen may be as small as 10).
	for i := 0; i < 8; i++ {
		r.write(t, "queued")
	}
	r.cancel()
	// The cancel must reach the receiver while Submit is blocked. Reading
	// in the netpoller, it checks ctx.Err() (set by cancel) once Submit
	// returns; on its own loop, the goroutine of Run has to wake and ask the
	// loop to drop the socket, then waits for that.
	if detach {
		testenv.Eventually(t, 10*time.Second, "Run waiting for the loop to drop the socket", func() bool {
			return testenv.Blocked("dgram.(*Receiver).serveOnLoop", "chan receive") > 0
		})
	}
	r.sink.Release()
	r.stop(t)
	if n := r.sink.Len(); n != 9 {
		t.Fatalf("delivered %d records after shutdown, want 9 (1 + 8 queued)", n)
	}
}

// An idle receiver, parked in the netpoller or waiting in poll(2) when
// detached, returns as soon as it is cancelled, and leaks nothing (the
// detached one's duplicate fd and eventfd included).
func TestRunReturnsPromptlyWhenIdle(t *testing.T) {
	for _, detach := range []bool{false, true} {
		t.Run(map[bool]string{false: "netpoll", true: "detached"}[detach], func(t *testing.T) { runReturnsPromptlyWhenIdle(t, detach) })
	}
}

func runReturnsPromptlyWhenIdle(t *testing.T, detach bool) {
	leaks := dgramtest.Snapshot(t)
	r := newRigMode(t, transport.DefaultOptions(), 0, detach)
	fn, reason := "dgram.(*Receiver).serveNetpoll", "IO wait"
	if detach {
		fn, reason = "dgram.(*Receiver).serveOnLoop", "select"
	}
	testenv.Eventually(t, 10*time.Second, "Run parked in "+fn, func() bool { return testenv.Blocked(fn, reason) > 0 })
	start := time.Now()
	r.stop(t)
	if took := time.Since(start); took > time.Second {
		t.Errorf("Run took %v to return after cancel", took)
	}
	r.send.Close()
	if err := r.rx.Close(); err != nil {
		t.Errorf("Close after Run: %v", err)
	}
	leaks.Check(t)
}
