package unixgram_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/ipclab/logagg/internal/sink"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/dgram/dgramtest"
	"github.com/ipclab/logagg/internal/transport/unixgram"
)

func tempSock(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "lg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "g.sock")
}

type running struct {
	l      transport.Listener
	sink   *dgramtest.Sink
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, raw string, o transport.Options) *running {
	t.Helper()
	r := &running{sink: dgramtest.NewSink(), done: make(chan error, 1)}
	l, err := transport.Open(raw, transport.Deps{Root: metrics.New(prometheus.NewRegistry()), Sink: sink.New(r.sink, sink.Options{}), Opts: o})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	r.l = l
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- l.Run(ctx) }()
	return r
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}

func TestDeliveryWithCreds(t *testing.T) {
	leaks := dgramtest.Snapshot(t)
	path := tempSock(t)
	r := start(t, "unixgram://"+path, transport.DefaultOptions())
	if r.l.URL() != "unixgram://"+path {
		t.Errorf("URL() = %q", r.l.URL())
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket file: %v %v, want a socket with mode 0660", fi, err)
	}
	c, err := net.Dial("unixgram", path)
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	for i := range n {
		if _, err := fmt.Fprintf(c, "msg %04d payload", i); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	r.sink.WaitLen(t, n, 20*time.Second)
	for i, rec := range r.sink.Records(t) {
		if want := fmt.Sprintf("msg %04d payload", i); rec.Message != want {
			t.Fatalf("record %d = %q, want %q", i, rec.Message, want)
		}
		p := rec.Agg.Peer
		if p == nil || p.PID == nil || int(*p.PID) != os.Getpid() || int(*p.UID) != os.Getuid() || int(*p.GID) != os.Getgid() || p.Via != "kernel" {
			t.Fatalf("record %d peer %+v, want our pid %d", i, p, os.Getpid())
		}
	}
	s := r.l.(*unixgram.Listener).Stats()
	t.Logf("recvmmsg: %d calls for %d datagrams, batch-size histogram (1,2,3-4,5-8,9-16,17-32,33-64) %v", s.Calls, s.Datagrams, s.BatchSizes[:7])
	r.stop(t)
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file still there after Run returned: %v", err)
	}
	leaks.Check(t)
}

// Datagrams from another process carry that process's pid.
func TestCredsOfOtherProcess(t *testing.T) {
	if _, err := os.Stat("/usr/bin/logger"); err != nil {
		testenv.SkipOrFail(t, "logger(1) not installed")
	}
	path := tempSock(t)
	r := start(t, "unixgram://"+path, transport.DefaultOptions())
	defer r.stop(t)
	p, err := os.StartProcess("/usr/bin/logger", []string{"logger", "-u", path, "-d", "from logger"}, &os.ProcAttr{Files: []*os.File{nil, os.Stdout, os.Stderr}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait()
	if err != nil || !st.Success() {
		t.Fatalf("logger: %v %v", st, err)
	}
	r.sink.WaitLen(t, 1, 10*time.Second)
	rec := r.sink.Records(t)[0]
	if rec.Agg.Peer == nil || rec.Agg.Peer.PID == nil || int(*rec.Agg.Peer.PID) != p.Pid {
		t.Fatalf("peer %+v, want logger's pid %d", rec.Agg.Peer, p.Pid)
	}
}

func TestRegularFileRefused(t *testing.T) {
	path := tempSock(t)
	if err := os.WriteFile(path, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := transport.Open("unixgram://"+path, transport.Deps{Root: metrics.New(nil), Sink: sink.New(dgramtest.NewSink(), sink.Options{}), Opts: transport.DefaultOptions()})
	if !errors.Is(err, transport.ErrNotSocket) {
		t.Fatalf("err = %v, want ErrNotSocket", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "keep me" {
		t.Errorf("regular file changed: %q", b)
	}
}

func TestRestartSamePathAndStaleSocket(t *testing.T) {
	path := tempSock(t)
	for round := range 3 {
		r := start(t, "unixgram://"+path, transport.DefaultOptions())
		c, err := net.Dial("unixgram", path)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		fmt.Fprintf(c, "round %d", round)
		c.Close()
		r.sink.WaitLen(t, 1, 10*time.Second)
		if m := r.sink.Records(t)[0].Message; m != fmt.Sprintf("round %d", round) {
			t.Errorf("round %d got %q", round, m)
		}
		r.stop(t)
	}
	// A stale socket file (left by a crash) is replaced.
	stale, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	stale.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("stale socket file missing: %v", err)
	}
	l, err := transport.Open("unixgram://"+path, transport.Deps{Root: metrics.New(nil), Sink: sink.New(dgramtest.NewSink(), sink.Options{}), Opts: transport.DefaultOptions()})
	if err != nil {
		t.Fatalf("Open over a stale socket: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Close left the socket file: %v", err)
	}
}

// Closing a listener must not remove a socket that replaced its own at the
// path (someone removed ours and bound another there), and a second
// listener on a held path is refused without touching it.
func TestCloseKeepsSuccessorsSocket(t *testing.T) {
	path := tempSock(t)
	d := transport.Deps{Sink: sink.New(dgramtest.NewSink(), sink.Options{}), Opts: transport.DefaultOptions()}
	old, err := transport.Open("unixgram://"+path, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := transport.Open("unixgram://"+path, d); !errors.Is(err, transport.ErrInUse) {
		t.Fatalf("second listener on a held path: %v, want ErrInUse", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	succ, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer succ.Close()
	old.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("old listener's Close removed the successor's socket: %v", err)
	}
}

func TestBadAddress(t *testing.T) {
	long := "unixgram:///" + string(make([]byte, 200))
	for _, raw := range []string{"unixgram://", long} {
		if _, err := transport.Open(raw, transport.Deps{Root: metrics.New(nil), Sink: sink.New(dgramtest.NewSink(), sink.Options{})}); !errors.Is(err, transport.ErrBadAddress) {
			t.Errorf("Open(%.30q) err = %v, want ErrBadAddress", raw, err)
		}
	}
	// A directory that does not exist cannot be bound.
	if _, err := transport.Open("unixgram:///nonexistent-dir-lg/x.sock", transport.Deps{Root: metrics.New(nil), Sink: sink.New(dgramtest.NewSink(), sink.Options{})}); !errors.Is(err, transport.ErrBadAddress) {
		t.Errorf("bind in missing dir: err = %v, want ErrBadAddress", err)
	}
}

// parse_hostname=on reads a HOSTNAME in RFC 3164 headers, as relays write
// it (rsyslog's omuxsock, syslog-ng's unix-dgram()); without it the first
// word after the timestamp is the tag, as imuxsock reads it. A local
// client's "tag[pid]:" reads the same either way.
func TestParseHostname(t *testing.T) {
	const relayed, local = "<173>Nov 26 20:59:56 vm lgapp[4242]: x", "<173>Nov 26 20:59:56 lgapp[4242]: y"
	for _, tc := range []struct {
		query, url                 string
		host, app, procid, message string
	}{
		{"", "", "", "vm", "", "lgapp[4242]: x"},
		{"?parse_hostname=off", "", "", "vm", "", "lgapp[4242]: x"},
		{"?parse_hostname=on", "?parse_hostname=on", "vm", "lgapp", "4242", "x"},
	} {
		path := tempSock(t)
		r := start(t, "unixgram://"+path+tc.query, transport.DefaultOptions())
		if want := "unixgram://" + path + tc.url; r.l.URL() != want {
			t.Errorf("%q: URL() = %q, want %q", tc.query, r.l.URL(), want)
		}
		c, err := net.Dial("unixgram", path)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{relayed, local} {
			if _, err := c.Write([]byte(p)); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
		r.sink.WaitLen(t, 2, 10*time.Second)
		recs := r.sink.Records(t)
		if s := recs[0].Syslog; s.Hostname != tc.host || s.Appname != tc.app || s.Procid != tc.procid || recs[0].Message != tc.message {
			t.Errorf("%q: %q read as %+v %q, want host %q app %q procid %q message %q", tc.query, relayed, s, recs[0].Message,
				tc.host, tc.app, tc.procid, tc.message)
		}
		if s := recs[1].Syslog; s.Hostname != "" || s.Appname != "lgapp" || s.Procid != "4242" || recs[1].Message != "y" {
			t.Errorf("%q: %q read as %+v %q", tc.query, local, s, recs[1].Message)
		}
		if recs[0].Agg.Listener != r.l.URL() {
			t.Errorf("agg.listener %q, want %q", recs[0].Agg.Listener, r.l.URL())
		}
		r.stop(t)
	}
}

// A bad parse_hostname, or a parameter the transport does not know, is an
// error at start-up, before anything is bound.
func TestParseHostnameBad(t *testing.T) {
	for _, q := range []string{"?parse_hostname=yes", "?parse_hostname=", "?parse_hostname=on&parse_hostname=off", "?parsehostname=on"} {
		path := tempSock(t)
		_, err := transport.Open("unixgram://"+path+q, transport.Deps{Root: metrics.New(nil), Sink: sink.New(dgramtest.NewSink(), sink.Options{})})
		if !errors.Is(err, transport.ErrBadAddress) {
			t.Errorf("%q: err = %v, want ErrBadAddress", q, err)
		} else {
			t.Logf("%q: %v", q, err)
		}
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%q: socket file created: %v", q, err)
		}
	}
}
