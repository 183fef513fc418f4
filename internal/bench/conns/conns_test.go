package conns

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
)

const statusText = `Name:	aggregator
Umask:	0022
State:	S (sleeping)
VmPeak:	 1261684 kB
VmHWM:	   71412 kB
VmRSS:	   36180 kB
RssAnon:	   20420 kB
Threads:	11
SigQ:	0/95448
`

func TestParseStatus(t *testing.T) {
	s, err := parseStatus([]byte(statusText))
	if err != nil {
		t.Fatal(err)
	}
	if s != (procStatus{Threads: 11, RSSKiB: 36180, HWMKiB: 71412}) {
		t.Fatalf("parsed %+v", s)
	}
	// A kernel thread has no Vm lines: zero, not an error.
	if s, err := parseStatus([]byte("Name:\tkthreadd\nThreads:\t1\n")); err != nil || s.Threads != 1 || s.RSSKiB != 0 {
		t.Fatalf("kernel thread: %+v, %v", s, err)
	}
	for name, text := range map[string]string{
		"no threads": "VmRSS:\t 1 kB\n",
		"bad rss":    "Threads:\t3\nVmRSS:\t x kB\n",
		"rss unit":   "Threads:\t3\nVmRSS:\t 12 pages\n",
		"bad count":  "Threads:\tmany\n",
	} {
		if _, err := parseStatus([]byte(text)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestParseNoFileLimit(t *testing.T) {
	text := `Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max open files            104096               104096               files
Max locked memory         8388608              8388608              bytes
`
	soft, hard, err := parseNoFileLimit([]byte(text))
	if err != nil || soft != 104096 || hard != 104096 {
		t.Fatalf("got %d/%d, %v", soft, hard, err)
	}
	soft, hard, err = parseNoFileLimit([]byte("Max open files            1024                 unlimited            files\n"))
	if err != nil || soft != 1024 || hard != ^uint64(0) {
		t.Fatalf("unlimited: got %d/%d, %v", soft, hard, err)
	}
	if _, _, err := parseNoFileLimit([]byte("Max processes 1 2 processes\n")); err == nil {
		t.Fatal("no open-files line, no error")
	}
}

// The live readers on this process: what the sampler and finishCell use
// on the aggregator.
func TestProcReadersOnSelf(t *testing.T) {
	s := startSampler(os.Getpid())
	defer s.close()
	now, peak, err := s.take()
	if err != nil || now.Threads < 1 || now.RSSKiB <= 0 || peak.HWMKiB < now.RSSKiB {
		t.Fatalf("now %+v peak %+v err %v", now, peak, err)
	}
	n, err := countFDs(os.Getpid())
	if err != nil || n < 3 {
		t.Fatalf("%d fds, %v", n, err)
	}
	soft, _, err := readNoFileLimit(os.Getpid())
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	if err != nil || soft != lim.Cur {
		t.Fatalf("limits soft %d (%v), getrlimit %d", soft, err, lim.Cur)
	}
}

// set raises the limit as far as it may and says when that is short of
// what was asked; restore puts the original back.
func TestFDLimit(t *testing.T) {
	l, err := newFDLimit()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := l.restore(); err != nil {
			t.Fatal(err)
		}
		var now syscall.Rlimit
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now)
		if now != l.orig {
			t.Fatalf("restored to %+v, want %+v", now, l.orig)
		}
	}()
	got, capped, err := l.set(16)
	if err != nil || capped || got != l.orig.Cur {
		t.Fatalf("set(16) = %d, capped %v, %v; want the original soft limit %d, never lower", got, capped, err, l.orig.Cur)
	}
	need := l.orig.Max + 100
	if l.nrOpen > 0 && need > l.nrOpen {
		t.Skipf("hard limit %d is already at fs.nr_open", l.orig.Max)
	}
	got, capped, err = l.set(need)
	if err != nil {
		t.Fatal(err)
	}
	if hasCapSysResource() {
		if got != need || capped {
			t.Fatalf("with CAP_SYS_RESOURCE: set(%d) = %d, capped %v", need, got, capped)
		}
	} else if got != l.orig.Max || !capped {
		t.Fatalf("without CAP_SYS_RESOURCE: set(%d) = %d, capped %v; want the hard limit %d, capped", need, got, capped, l.orig.Max)
	}
	var now syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now)
	if now.Cur != got {
		t.Fatalf("getrlimit says %d after set returned %d", now.Cur, got)
	}
}

func TestSourceAddr(t *testing.T) {
	for i, want := range map[int][4]byte{0: {127, 0, 0, 1}, perSource - 1: {127, 0, 0, 1}, perSource: {127, 0, 0, 2}, 3*perSource + 5: {127, 0, 0, 4}} {
		if got := sourceAddr(i); got != want {
			t.Errorf("sourceAddr(%d) = %v, want %v", i, got, want)
		}
	}
}

// countingListener accepts and holds connections, counting them as the
// aggregator's logagg_connections does, and reports where they came from.
func countingListener(t *testing.T, ln net.Listener) (open func() (int64, error), remotes func() []string) {
	t.Helper()
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	open = func() (int64, error) {
		mu.Lock()
		defer mu.Unlock()
		return int64(len(conns)), nil
	}
	remotes = func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, c := range conns {
			out = append(out, c.RemoteAddr().String())
		}
		return out
	}
	return open, remotes
}

func TestOpenIdleUnix(t *testing.T) {
	path := filepath.Join(testenv.ShortTempDir(t), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	open, _ := countingListener(t, ln)
	n := window + 100 // more than one window: opening waits for the count
	s, err := openIdle(t.Context(), "unix://"+path, n, open)
	defer s.close()
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := open(); s.len() != n || c != int64(n) {
		t.Fatalf("opened %d, counted %d, want %d", s.len(), c, n)
	}
	s.close()
	if s.len() != 0 {
		t.Fatal("close left descriptors")
	}
	s.close() // again: a no-op
}

func TestOpenIdleTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	open, remotes := countingListener(t, ln)
	s, err := openIdle(t.Context(), "tcp://"+ln.Addr().String(), 50, open)
	defer s.close()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range remotes() {
		if !strings.HasPrefix(r, "127.0.0.1:") {
			t.Fatalf("connection from %s, want 127.0.0.1 for the first %d", r, perSource)
		}
	}
	// Connection perSource comes from the next source address.
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, remotes2 := countingListener(t, ln2)
	dial, _, err := dialerFor("tcp://" + ln2.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fd, err := dial(perSource)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if r := remotes2(); len(r) == 1 {
			if !strings.HasPrefix(r[0], "127.0.0.2:") {
				t.Fatalf("connection %d came from %s, want 127.0.0.2", perSource, r[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the connection from 127.0.0.2 was never accepted")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// While the count lags, opening waits for it, but not past the context;
// what was opened is returned for closing.
func TestOpenIdleStopsWithTheContext(t *testing.T) {
	path := filepath.Join(testenv.ShortTempDir(t), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	countingListener(t, ln)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	s, err := openIdle(ctx, "unix://"+path, 10, func() (int64, error) { return 0, nil })
	defer s.close()
	if !errors.Is(err, ctx.Err()) || s.len() != 10 {
		t.Fatalf("err %v with %d open, want the context's error and 10 to close", err, s.len())
	}
}

func TestValidate(t *testing.T) {
	o := Options{AggregatorBin: "a", ProducerBin: "p"}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(o.Idle) != 3 || o.Idle[2] != 50000 || o.Duration != 5*time.Second || o.Producers != 1 || o.Size != 100 || o.Runs != 1 || len(o.Transports) != 2 {
		t.Fatalf("defaults %+v", o)
	}
	q := Options{AggregatorBin: "a", ProducerBin: "p", Quick: true}
	if err := q.Validate(); err != nil || len(q.Idle) != 2 || q.Idle[1] != 1000 || q.Duration != time.Second {
		t.Fatalf("quick defaults %+v, %v", q, err)
	}
	for name, o := range map[string]Options{
		"udp":       {Transports: []string{"udp"}},
		"negative":  {Idle: []int{-1}},
		"runs":      {Runs: -1},
		"cpus":      {CPUs: "all"},
		"producers": {Producers: -2},
	} {
		o.AggregatorBin, o.ProducerBin = "a", "p"
		if err := o.Validate(); !errors.Is(err, ErrBadOptions) {
			t.Errorf("%s: %v, want ErrBadOptions", name, err)
		}
	}
	if err := (&Options{}).Validate(); !errors.Is(err, ErrBadOptions) {
		t.Errorf("no binaries: %v", err)
	}
}

func row(t string, idle int, held int64, rate float64, rssMiB, idleMiB int64) Row {
	return Row{Transport: t, Idle: idle, Held: held, RecordsPerS: rate, RSSKiB: rssMiB << 10, IdleRSSKiB: idleMiB << 10,
		Threads: 11, ThreadsAfterClose: 11, ThreadBound: 24, GOMAXPROCS: 2, Sent: 100, Written: 100}
}

func TestCompareAndTable(t *testing.T) {
	rows := []Row{
		row("unixsock", 0, 0, 200000, 20, 15),
		row("unixsock", 10000, 10000, 190000, 30, 25),       // 0.95x, 1048.6 B/conn: met
		row("unixsock", 50000, 19744, 170000, 120, 40),      // 0.85x, 5311 B/conn, capped: missed
		row("tcp", 10000, 10000, 100000, 30, 25),            // no 0-idle row for tcp
		{Transport: "tcp", Idle: 0, Error: "boom", Lost: 3}, // failed: not a base
	}
	rows[2].Threads = 25
	Compare(rows)
	u0, u1, u2, t1, t0 := rows[0], rows[1], rows[2], rows[3], rows[4]
	if !u0.Compared || u0.VsNoIdle != 0 || len(u0.Missed) != 0 || u0.Targets() != "met" {
		t.Errorf("base row: %+v", u0)
	}
	if u1.VsNoIdle != 0.95 || u1.RSSPerConn != 10*1024*1024/10000.0 || u1.IdleRSSPerConn != u1.RSSPerConn || u1.Targets() != "met" {
		t.Errorf("10000 row: x%v, %v B/conn, %q", u1.VsNoIdle, u1.RSSPerConn, u1.Targets())
	}
	if got := u2.Targets(); got != "missed: held, threads, rate, rss" {
		t.Errorf("50000 row: %q", got)
	}
	if t1.Compared || t1.VsNoIdle != 0 || t1.Targets() != "no 0-idle row; rest met" {
		t.Errorf("tcp row without a base: %+v %q", t1, t1.Targets())
	}
	if got := t0.Targets(); got != "missed: lost, error" {
		t.Errorf("failed row: %q", got)
	}
	Compare(rows) // again: the same verdicts, not appended twice
	if got := rows[2].Targets(); got != "missed: held, threads, rate, rss" {
		t.Errorf("second Compare: %q", got)
	}

	tab := Tables(rows)[0].Table
	if len(tab.Rows) != len(rows) || len(tab.Header) != len(tab.Rows[0]) {
		t.Fatalf("table %d rows of %d cells, header %d", len(tab.Rows), len(tab.Rows[0]), len(tab.Header))
	}
	cell := func(r int, col string) string {
		for i, h := range tab.Header {
			if h == col {
				return tab.Rows[r][i]
			}
		}
		t.Fatalf("no column %q", col)
		return ""
	}
	for _, c := range []struct {
		r         int
		col, want string
	}{
		{0, "x 0 idle", "-"}, {0, "B/conn", "-"}, {1, "x 0 idle", "0.95x"}, {1, "B/conn", "1049"}, {1, "idle B/conn", "1049"},
		{2, "threads ok", "NO"}, {2, "held", "19744"}, {1, "RSS MiB", "30.0"}, {3, "B/conn", "-"}, {1, "targets", "met"},
	} {
		if got := cell(c.r, c.col); got != c.want {
			t.Errorf("row %d %s = %q, want %q", c.r, c.col, got, c.want)
		}
	}
}

func TestNoiseNotes(t *testing.T) {
	rows := []Row{row("unixsock", 0, 0, 1, 20, 15), row("unixsock", 10000, 10000, 1, 30, 25), row("tcp", 1000, 1000, 1, 30, 25)}
	got := noiseNotes(rows)
	want := "unixsock: with no idle connections the producers alone raised RSS by 5.0 MiB (idle RSS to RSS), which is 524 B/conn at 10000 held: B/conn differences smaller than that are noise"
	if len(got) != 1 || got[0] != want {
		t.Fatalf("notes %q\nwant [%q]", got, want)
	}
}

func TestTCPPeersOf(t *testing.T) {
	text := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:9231 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 193 1 0000000000000000 100 0 0 10 0
   1: 0100007F:9231 0200007F:DE30 01 00000000:00000000 00:00000000 00000000     0        0 0 3 0000000000000000
   2: 0100007F:DE31 0100007F:9231 01 00000000:00000000 00:00000000 00000000     0        0 0 3 0000000000000000
   3: 0100007F:9231 0100007F:DE32 08 00000000:00000000 00:00000000 00000000     0        0 0 3 0000000000000000
`
	got := strings.Join(tcpPeersOf([]byte(text), 0x9231), "; ")
	if want := "127.0.0.2:56880 ESTABLISHED; 127.0.0.1:56882 CLOSE_WAIT"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestParseStatCPU(t *testing.T) {
	// The command name may contain spaces and parentheses.
	stat := "4242 (aggre (gator) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 150 37 0 0 20 0 11 0 1000 1261684 9045 18446744073709551615\n"
	if d, err := parseStatCPU([]byte(stat)); err != nil || d != 1870*time.Millisecond {
		t.Fatalf("got %v, %v; want 1.87s (150+37 ticks)", d, err)
	}
	if _, err := parseStatCPU([]byte("4242 (x) S 1 2")); err == nil {
		t.Fatal("short stat parsed")
	}
	if d, err := readCPU(os.Getpid()); err != nil || d < 0 {
		t.Fatalf("own CPU %v, %v", d, err)
	}
}
