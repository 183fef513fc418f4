package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/sink"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
)

// Case describes one transport to the suite.
type Case struct {
	Name      string // subtest name
	Transport string // expected agg.transport
	// NewURL returns a fresh listen URL (a temp path, 127.0.0.1:0, ...).
	NewURL func(t testing.TB) string
	// Dial opens a sender to the listener whose URL() is url. Each Write
	// is one record with its trailing newline; datagram senders send one
	// datagram per Write.
	Dial func(url string) (io.WriteCloser, error)

	Stream bool // backpressure, no loss (byte streams, and shm rings and queues)
	// Messages marks a message transport: each Write is one message,
	// read as one record whatever bytes it holds (datagrams, queue
	// messages, ring frames); otherwise the bytes are a stream, framed by
	// newlines and NULs.
	Messages bool
	// Conns marks a connection-oriented transport: every Dial is a
	// connection the listener accepts and serves (unix, tcp, shm), so the
	// connection limit, the idle timeout and the thread bound apply.
	Conns bool
	// CutByKernel marks a transport whose messages longer than the
	// maximum record size are cut by the kernel (datagrams): the record
	// is kept truncated and the cut bytes are counted as dropped.
	// Otherwise a long record is kept whole, in pieces.
	CutByKernel bool
	Creds       bool // records carry the sender's pid/uid/gid from the kernel
	PeerAddr    bool // records carry the sender's address (agg.peer.addr)
	Lossy       bool // records may be lost; every loss must show in dropped_total
	PathBased   bool // the URL names a filesystem path (ErrNotSocket check)
	// Exclusive marks an address one listener holds at a time (a path, a
	// queue name): a second Open fails with transport.ErrInUse naming the
	// holder's pid and disturbs nothing.
	Exclusive bool
	// Stat, if set, returns the owner and mode of the object at the
	// listener's address (a queue); path-based cases use lstat.
	Stat func(t testing.TB, url string) unix.Stat_t

	// Single marks a single-source transport (our own stdin, a captured
	// child's output): there is one sender per listener, so the
	// many-senders, restart, socket-path and connect/disconnect leak
	// subtests do not apply. Dial is called once per listener.
	Single bool
	// Open, if set, creates the listener instead of transport.Open (stdin
	// reads a pipe the test owns rather than the process's stdin).
	Open func(raw string, d transport.Deps) (transport.Listener, error)
	// NoDrain, when set, says why the drain and hard-stop subtests do not
	// apply (a captured child owns what is still in its input when it is
	// stopped).
	NoDrain string
	// KeepsUnread marks a transport whose sender keeps what the listener
	// has not taken (a shared-memory ring offers it to the next
	// aggregator): at a hard stop it is neither read nor counted.
	KeepsUnread bool
	// Skip names subtests that do not apply, each with the reason (a
	// request/response protocol refuses what a stream keeps and flags).
	Skip map[string]string
}

// waitFor is the deadline of every poll in the suite: long, because a
// loaded 2-vCPU machine running -race is slow, and polls end early anyway.
const waitFor = 30 * time.Second

// Run runs the conformance suite for c.
func Run(t *testing.T, c Case) {
	// A subtest named in c.Skip starts and skips with its reason.
	run := func(name string, f func(t *testing.T)) {
		t.Run(name, func(t *testing.T) {
			if why, ok := c.Skip[name]; ok {
				t.Skip(why)
			}
			f(t)
		})
	}
	run("basic", func(t *testing.T) { testBasic(t, c) })
	run("metadata", func(t *testing.T) { testMetadata(t, c) })
	run("concurrent", func(t *testing.T) {
		if c.Single {
			t.Skip("single-source transport")
		}
		testConcurrent(t, c)
	})
	run("oversized", func(t *testing.T) { testOversized(t, c) })
	run("bad_input", func(t *testing.T) { testBadInput(t, c) })
	run("backpressure", func(t *testing.T) {
		if !c.Stream {
			t.Skip("datagram transport: loss is counted instead of backpressure (Lossy)")
		}
		testBackpressure(t, c)
	})
	run("drain", func(t *testing.T) {
		if c.NoDrain != "" {
			t.Skip(c.NoDrain)
		}
		testDrain(t, c)
	})
	run("hard_stop", func(t *testing.T) {
		if c.NoDrain != "" {
			t.Skip(c.NoDrain)
		}
		testHardStop(t, c)
	})
	run("restart", func(t *testing.T) {
		if c.Single {
			t.Skip("single-source transport: its source does not come back")
		}
		testRestart(t, c)
	})
	run("not_socket", func(t *testing.T) {
		if !c.PathBased {
			t.Skip("transport is not named by a path")
		}
		testNotSocket(t, c)
	})
	run("second_instance", func(t *testing.T) {
		if !c.Exclusive {
			t.Skip("address not held exclusively (ports: the kernel refuses a second bind)")
		}
		testSecondInstance(t, c)
	})
	run("foreign_owner", func(t *testing.T) {
		if !c.PathBased {
			t.Skip("transport is not named by a path")
		}
		testForeignOwner(t, c)
	})
	run("perms", func(t *testing.T) {
		if !c.PathBased && c.Stat == nil {
			t.Skip("nothing with a mode is created")
		}
		testPerms(t, c)
	})
	run("leaks", func(t *testing.T) {
		if c.Single {
			t.Skip("single-source transport: no connect/disconnect cycles")
		}
		testLeaks(t, c)
	})
	conns := func(name string, f func(*testing.T, Case)) {
		run(name, func(t *testing.T) {
			if !c.Conns {
				t.Skip("not a connection-oriented transport")
			}
			f(t, c)
		})
	}
	conns("idle_conns_no_threads", testIdleConnsNoThreads)
	conns("limit_waits", testLimitWaits)
	conns("fds_short_waits", testFDsShortWaits)
	conns("idle_timeout", testIdleTimeout)
	run("partial_budget", func(t *testing.T) {
		if !c.Conns || c.Messages {
			t.Skip("no partial frames: not a connection-oriented byte stream")
		}
		testPartialBudget(t, c)
	})
}

// env is one running listener.
type env struct {
	t      testing.TB
	raw    string
	l      transport.Listener
	m      *metrics.Metrics
	cap    *Capture
	cancel context.CancelFunc
	hard   context.CancelFunc // ends the sink's hard stop
	done   chan error
	ended  bool
	err    error
}

func suiteOptions() transport.Options {
	o := transport.DefaultOptions()
	o.MaxRecord = 64 << 10
	o.DrainGrace = time.Second
	o.RcvBuf = 0
	o.SocketGID = -1
	return o
}

func start(t testing.TB, c Case, raw string, o transport.Options) *env {
	t.Helper()
	return startBatching(t, c, raw, o, 16<<10)
}

// startBatching is start with the sink handing over a batch at batchBytes.
func startBatching(t testing.TB, c Case, raw string, o transport.Options, batchBytes int) *env {
	t.Helper()
	e := &env{t: t, raw: raw, m: metrics.New(nil), cap: NewCapture(), done: make(chan error, 1)}
	open := transport.Open
	if c.Open != nil {
		open = c.Open
	}
	hard, hardNow := context.WithCancel(context.Background())
	e.hard = hardNow
	t.Cleanup(hardNow)
	// Listeners reserve each connection's descriptors here, as the
	// daemon's do (testFDsShortWaits).
	fds, err := transport.NewFDGate(transport.DefaultFDReserve)
	if err != nil {
		t.Fatal(err)
	}
	l, err := open(raw, transport.Deps{Root: e.m, Sink: sink.New(e.cap, sink.Options{HardStop: hard, BatchBytes: batchBytes}), Opts: o, FDs: fds})
	if err != nil {
		t.Fatalf("Open(%q): %v", raw, err)
	}
	e.l = l
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() { e.done <- l.Run(ctx) }()
	t.Cleanup(func() {
		e.cap.Unblock()
		e.stop()
	})
	return e
}

// waitExit waits for Run to return without cancelling it.
func (e *env) waitExit() {
	e.t.Helper()
	if e.ended {
		return
	}
	select {
	case e.err = <-e.done:
		e.ended = true
	case <-time.After(waitFor):
		e.t.Fatalf("Run did not return within %v of its source ending; the goroutines:\n%s", waitFor, goroutines())
	}
}

// stop cancels Run and returns its result.
func (e *env) stop() error {
	e.t.Helper()
	if e.ended {
		return e.err
	}
	e.cancel()
	select {
	case e.err = <-e.done:
	case <-time.After(waitFor):
		e.t.Fatalf("Run did not return within %v of cancel; the goroutines:\n%s", waitFor, goroutines())
	}
	e.ended = true
	return e.err
}

// goroutines is every goroutine's stack, for a test that found one stuck.
func goroutines() []byte {
	buf := make([]byte, 1<<20)
	return buf[:runtime.Stack(buf, true)]
}

func (e *env) counter(cv *prometheus.CounterVec, lv ...string) float64 {
	var m dto.Metric
	if err := cv.WithLabelValues(append([]string{e.l.URL()}, lv...)...).Write(&m); err != nil {
		e.t.Fatalf("read metric: %v", err)
	}
	return m.GetCounter().GetValue()
}

func (e *env) gauge(gv *prometheus.GaugeVec) float64 {
	var m dto.Metric
	if err := gv.WithLabelValues(e.l.URL()).Write(&m); err != nil {
		e.t.Fatalf("read metric: %v", err)
	}
	return m.GetGauge().GetValue()
}

func (e *env) dropped() float64 {
	var n float64
	for _, cause := range []string{metrics.CauseKernelOverflow, metrics.CauseDrainTimeout, metrics.CauseWriteError} {
		n += e.counter(e.m.Dropped, cause)
	}
	return n
}

func (e *env) dial(c Case) io.WriteCloser {
	e.t.Helper()
	w, err := c.Dial(e.l.URL())
	if err != nil {
		e.t.Fatalf("dial %s: %v", e.l.URL(), err)
	}
	return w
}

// waitRecords polls until n records arrived (for a lossy case: until
// records plus counted drops reach n) and returns them.
func (e *env) waitRecords(c Case, n int) []Rec {
	e.t.Helper()
	testenv.Poll(e.t, waitFor, fmt.Sprintf("%d records", n), func() (string, bool) {
		got := e.cap.Len()
		return fmt.Sprintf("%d records, %v counted dropped", got, e.dropped()),
			got >= n || (c.Lossy && float64(got)+e.dropped() >= float64(n))
	})
	return e.records()
}

func (e *env) records() []Rec {
	e.t.Helper()
	if errs := e.cap.Errors(); len(errs) > 0 {
		e.t.Fatalf("malformed batches: %v", errs)
	}
	recs, err := e.cap.Records()
	if err != nil {
		e.t.Fatal(err)
	}
	return recs
}

func send(t testing.TB, w io.Writer, payload string) {
	t.Helper()
	if _, err := w.Write([]byte(payload + "\n")); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// checkSeq checks that recs hold the records "<prefix> <i> ..." for i in
// [0,n) exactly once and in order (a lossy case may miss some, all counted
// as dropped).
func checkSeq(t testing.TB, c Case, recs []Rec, prefix string, n int, dropped float64) {
	t.Helper()
	next, missing := 0, 0
	for _, r := range recs {
		rest, ok := strings.CutPrefix(r.Message, prefix+" ")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, " ")
		i, err := strconv.Atoi(num)
		if err != nil {
			t.Fatalf("bad record %q", r.Message)
		}
		if i < next {
			t.Fatalf("%s: record %d after %d: duplicate or reordered", prefix, i, next-1)
		}
		if i > next {
			if !c.Lossy {
				t.Fatalf("%s: records %d..%d missing (next seen %d)", prefix, next, i-1, i)
			}
			missing += i - next
		}
		next = i + 1
	}
	if next < n {
		if !c.Lossy {
			t.Fatalf("%s: got records up to %d, want %d", prefix, next, n)
		}
		missing += n - next
	}
	if float64(missing) > dropped {
		t.Fatalf("%s: %d records missing but only %v counted as dropped", prefix, missing, dropped)
	}
}

func pad(n int) string { return strings.Repeat("x", n) }

func testBasic(t *testing.T, c Case) {
	e := start(t, c, c.NewURL(t), suiteOptions())
	w := e.dial(c)
	const n = 2000
	var payloadBytes int
	for i := range n {
		p := fmt.Sprintf("basic %06d %s", i, pad(60))
		payloadBytes += len(p)
		send(t, w, p)
	}
	w.Close()
	if c.Single {
		// The source ended, so the listener ends by itself (stdin at EOF,
		// a child that exited, whose exit record comes last): compare the
		// counters with the captures only after that.
		e.waitExit()
	}
	recs := e.waitRecords(c, n)
	checkSeq(t, c, recs, "basic", n, e.dropped())
	if got := e.counter(e.m.RecordsIn); got != float64(len(recs)) {
		t.Errorf("records_in_total = %v, captured %d", got, len(recs))
	}
	if got := e.counter(e.m.BytesIn); got < float64(payloadBytes)*float64(len(recs))/n {
		t.Errorf("bytes_in_total = %v, want >= %d", got, payloadBytes)
	}
	var formats float64
	for _, f := range []string{"raw", "json", "rfc3164", "rfc5424"} {
		formats += e.counter(e.m.Formats, f)
	}
	if formats != float64(len(recs)) {
		t.Errorf("records_by_format_total sums to %v, captured %d", formats, len(recs))
	}
	if e.cap.Batches() >= int64(len(recs)) && len(recs) > 100 {
		t.Errorf("%d batches for %d records: records are not batched", e.cap.Batches(), len(recs))
	}
}

func testMetadata(t *testing.T, c Case) {
	e := start(t, c, c.NewURL(t), suiteOptions())
	before := time.Now().UnixNano()
	w := e.dial(c)
	for i := range 3 {
		send(t, w, fmt.Sprintf("meta %d", i))
	}
	recs := e.waitRecords(c, 3)
	after := time.Now().UnixNano()
	var local string
	if lc, ok := w.(interface{ LocalAddr() net.Addr }); ok {
		local = lc.LocalAddr().String()
	}
	w.Close()
	for _, r := range recs {
		if r.Agg.Transport != c.Transport {
			t.Errorf("agg.transport = %q, want %q", r.Agg.Transport, c.Transport)
		}
		if r.Agg.Listener != e.l.URL() {
			t.Errorf("agg.listener = %q, want %q", r.Agg.Listener, e.l.URL())
		}
		if r.Agg.RecvNS < before || r.Agg.RecvNS > after {
			t.Errorf("agg.recv_ns = %d, not within [%d, %d]", r.Agg.RecvNS, before, after)
		}
		if c.Creds {
			p := r.Agg.Peer
			if p == nil || p.PID == nil || p.UID == nil || p.GID == nil {
				t.Fatalf("no peer credentials in %s", r.Raw)
			}
			if int(*p.PID) != os.Getpid() || int(*p.UID) != os.Getuid() || int(*p.GID) != os.Getgid() {
				t.Errorf("peer = pid %d uid %d gid %d, want %d %d %d", *p.PID, *p.UID, *p.GID, os.Getpid(), os.Getuid(), os.Getgid())
			}
			if p.Via != "kernel" {
				t.Errorf("peer.via = %q, want kernel", p.Via)
			}
		}
		if c.PeerAddr {
			if r.Agg.Peer == nil || r.Agg.Peer.Addr == "" {
				t.Fatalf("no peer address in %s", r.Raw)
			}
			if local != "" && r.Agg.Peer.Addr != local {
				t.Errorf("peer.addr = %q, sender is %q", r.Agg.Peer.Addr, local)
			}
		}
	}
}

func testConcurrent(t *testing.T, c Case) {
	e := start(t, c, c.NewURL(t), suiteOptions())
	const senders, per = 4, 500
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for s := range senders {
		w := e.dial(c)
		wg.Go(func() {
			defer w.Close()
			for i := range per {
				if _, err := fmt.Fprintf(w, "conc%d %06d %s\n", s, i, pad(40)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("sender: %v", err)
	}
	recs := e.waitRecords(c, senders*per)
	for s := range senders {
		checkSeq(t, c, recs, fmt.Sprintf("conc%d", s), per, e.dropped())
	}
}

func testOversized(t *testing.T, c Case) {
	o := suiteOptions()
	o.MaxRecord = 1024
	e := start(t, c, c.NewURL(t), o)
	w := e.dial(c)
	big := "big " + pad(3000)
	send(t, w, "before")
	send(t, w, big)
	send(t, w, "after")
	want := 5 // before, three pieces of the big record, after
	if c.CutByKernel {
		want = 3
	}
	recs := e.waitRecords(c, want)
	w.Close()
	if len(recs) != want {
		t.Fatalf("got %d records, want %d", len(recs), want)
	}
	if recs[0].Message != "before" || recs[want-1].Message != "after" {
		t.Errorf("neighbours damaged: %q, %q", recs[0].Message, recs[want-1].Message)
	}
	if len(recs[0].Agg.Flags) != 0 || len(recs[want-1].Agg.Flags) != 0 {
		t.Errorf("neighbour flagged: %v, %v", recs[0].Agg.Flags, recs[want-1].Agg.Flags)
	}
	if c.CutByKernel {
		if got := recs[1]; got.Message != big[:1024] || !got.HasFlag("truncated") {
			t.Errorf("oversized datagram kept %d bytes flagged %v, want the first 1024, truncated", len(got.Message), got.Agg.Flags)
		}
		if got := e.counter(e.m.DroppedBytes, metrics.CauseOversize); got != float64(len(big)+1-1024) {
			t.Errorf("dropped_bytes_total{cause=oversize} = %v, want %d", got, len(big)+1-1024)
		}
		return
	}
	// Nothing is lost: the pieces are the record, each at most 1024 bytes.
	var whole strings.Builder
	for i, r := range recs[1:4] {
		whole.WriteString(r.Message)
		if len(r.Message) > 1024 {
			t.Errorf("piece %d is %d bytes", i, len(r.Message))
		}
		if r.HasFlag("truncated") != (i < 2) || r.HasFlag("continuation") != (i > 0) {
			t.Errorf("piece %d flags %v", i, r.Agg.Flags)
		}
	}
	if whole.String() != big {
		t.Errorf("pieces hold %d bytes, want the %d of the record", whole.Len(), len(big))
	}
	if got := e.counter(e.m.DecodeErrors, metrics.KindTruncated); got != 2 {
		t.Errorf("decode_errors_total{kind=truncated} = %v, want 2", got)
	}
	if got := e.counter(e.m.DecodeErrors, metrics.KindContinuation); got != 2 {
		t.Errorf("decode_errors_total{kind=continuation} = %v, want 2", got)
	}
}

func testBadInput(t *testing.T, c Case) {
	e := start(t, c, c.NewURL(t), suiteOptions())
	w := e.dial(c)
	payloads := []string{"utf8 \xff\xfe end", "nul \x00 inside", `{"broken": `, "fine"}
	for _, p := range payloads {
		send(t, w, p)
	}
	// A NUL ends a frame on a stream (as in syslog-ng); a message is one
	// record whatever it holds.
	want := []string{"utf8 \ufffd\ufffd end", "nul \x00 inside", `{"broken": `, "fine"}
	if !c.Messages {
		want = []string{"utf8 \ufffd\ufffd end", "nul ", " inside", `{"broken": `, "fine"}
	}
	recs := e.waitRecords(c, len(want))
	w.Close()
	if len(recs) != len(want) {
		t.Fatalf("got %d records, want %d", len(recs), len(want))
	}
	for i, r := range recs {
		if r.Message != want[i] {
			t.Errorf("record %d: message %q, want %q", i, r.Message, want[i])
		}
	}
	if !recs[0].HasFlag("invalid_utf8") {
		t.Errorf("invalid UTF-8 not flagged: %s", recs[0].Raw)
	}
	if c.Messages && !recs[1].HasFlag("nul_bytes") {
		t.Errorf("NUL not flagged: %s", recs[1].Raw)
	}
	if last := recs[len(recs)-1]; len(last.Agg.Flags) != 0 {
		t.Errorf("good record after bad ones damaged: %s", last.Raw)
	}
	// Every flag in the output is counted once per record, under its kind.
	perFlag := map[string]int{}
	for _, r := range recs {
		for _, f := range r.Agg.Flags {
			perFlag[f]++
		}
	}
	for f, n := range perFlag {
		if got := e.counter(e.m.DecodeErrors, f); got != float64(n) {
			t.Errorf("decode_errors_total{kind=%s} = %v, want %d", f, got, n)
		}
	}
}

func testBackpressure(t *testing.T, c Case) {
	o := suiteOptions()
	o.RcvBuf = 64 << 10
	o.TCPRcvBuf = 64 << 10 // also stops TCP receive-buffer autotuning
	e := start(t, c, c.NewURL(t), o)
	e.cap.Block()
	w := e.dial(c)
	// Far more than the kernel buffers between sender and listener hold.
	const recSize, n = 4000, 3000
	var written atomic.Int64
	sendErr := make(chan error, 1)
	go func() {
		p := pad(recSize)
		for i := range n {
			if _, err := fmt.Fprintf(w, "bp %06d %s\n", i, p); err != nil {
				sendErr <- err
				return
			}
			written.Add(1)
		}
		sendErr <- nil
	}()
	// Wait for the listener to block in Submit, then for the sender to
	// stop making progress: no record written during 100 ms (a window,
	// not an order: the sender either blocked or is still writing).
	waitUntil(t, "the listener to block handing over", func() bool { return e.cap.Waiting() > 0 })
	last := testenv.Poll(t, waitFor, "the sender to block", func() (int64, bool) {
		before := written.Load()
		time.Sleep(100 * time.Millisecond)
		cur := written.Load()
		return cur, cur == before
	})
	select {
	case err := <-sendErr:
		t.Fatalf("sender finished (err %v) while the queue was blocked: no backpressure", err)
	default:
	}
	if last >= n {
		t.Fatalf("all %d records written while blocked", n)
	}
	e.cap.Unblock()
	if err := <-sendErr; err != nil {
		t.Fatalf("sender: %v", err)
	}
	w.Close()
	recs := e.waitRecords(c, n)
	checkSeq(t, c, recs, "bp", n, 0)
	if d := e.dropped(); d != 0 {
		t.Errorf("dropped %v records under backpressure", d)
	}
}

func testDrain(t *testing.T, c Case) {
	e := start(t, c, c.NewURL(t), suiteOptions())
	w := e.dial(c)
	defer w.Close()
	const n = 2000
	for i := range n {
		send(t, w, fmt.Sprintf("drain %06d %s", i, pad(20)))
	}
	// Cancel with the sender still connected: what it wrote is already in
	// the kernel and must be read before Run returns.
	if err := e.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	recs := e.records()
	checkSeq(t, c, recs, "drain", n, e.dropped())
}

// testHardStop checks that what the drain deadline makes the sink give up
// is counted, in records and in bytes: records in = records out + dropped,
// and the dropped bytes are those of the dropped records' payloads.
func testHardStop(t *testing.T, c Case) {
	// One record per batch: the first blocks in the hand-over, and the
	// listener meets the hard stop with the rest read and not yet handed
	// over, so both ways of giving up are exercised.
	e := startBatching(t, c, c.NewURL(t), suiteOptions(), 1)
	e.cap.Block()
	w := e.dial(c)
	defer w.Close()
	// Few records: a unix datagram socket queues ten, and a blocked
	// listener reads no more.
	const n, size = 6, 40
	for i := range n {
		send(t, w, fmt.Sprintf("hard %d %s", i, pad(size-len(fmt.Sprintf("hard %d ", i)))))
	}
	waitUntil(t, "the listener blocks handing over a batch", func() bool { return e.cap.Waiting() > 0 })
	e.cancel() // the drain starts, held by the full queue...
	e.hard()   // ...until the deadline gives up on it
	select {
	case e.err = <-e.done:
		e.ended = true
	case <-time.After(waitFor):
		t.Fatalf("Run did not return within %v of the hard stop", waitFor)
	}
	in := e.counter(e.m.RecordsIn)
	out := float64(e.cap.Len())
	dropped := e.counter(e.m.Dropped, metrics.CauseDrainTimeout)
	droppedBytes := e.counter(e.m.DroppedBytes, metrics.CauseDrainTimeout)
	t.Logf("in %v, out %v, dropped %v records / %v bytes", in, out, dropped, droppedBytes)
	if dropped == 0 {
		t.Fatal("nothing counted as dropped at the hard stop")
	}
	if in != out+dropped {
		t.Errorf("records in %v != out %v + dropped %v", in, out, dropped)
	}
	if droppedBytes != dropped*size {
		t.Errorf("dropped bytes %v, want %v (%v records of %d bytes)", droppedBytes, dropped*size, dropped, size)
	}
	if !c.KeepsUnread && in != n {
		t.Errorf("records in %v, want the %d sent: what the listener held or the kernel queued for it must be read and counted", in, n)
	}
}

func testRestart(t *testing.T, c Case) {
	e := start(t, c, c.NewURL(t), suiteOptions())
	u := e.l.URL()
	w := e.dial(c)
	send(t, w, "first 000000")
	e.waitRecords(c, 1)
	w.Close()
	if err := e.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if c.PathBased {
		p := pathOf(t, u)
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists after Run returned (err %v)", p, err)
		}
	}
	e2 := start(t, c, u, suiteOptions())
	if e2.l.URL() != u {
		t.Errorf("restarted listener URL %q, want %q", e2.l.URL(), u)
	}
	w2 := e2.dial(c)
	defer w2.Close()
	send(t, w2, "second 000000")
	recs := e2.waitRecords(c, 1)
	if !c.Lossy && recs[0].Message != "second 000000" {
		t.Errorf("after restart got %q", recs[0].Message)
	}
}

func pathOf(t testing.TB, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	p, err := transport.PathOf(u)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func testNotSocket(t *testing.T, c Case) {
	raw := c.NewURL(t)
	p := pathOf(t, raw)
	content := []byte("precious data\n")
	if err := os.WriteFile(p, content, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := transport.Open(raw, transport.Deps{Root: metrics.New(nil), Sink: sink.New(NewCapture(), sink.Options{}), Opts: suiteOptions()})
	if err == nil {
		l.Close()
		t.Fatalf("Open over a regular file succeeded")
	}
	if !errors.Is(err, transport.ErrNotSocket) {
		t.Errorf("err = %v, want ErrNotSocket", err)
	}
	if err != nil && (!strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "owned by") || !strings.Contains(err.Error(), "mode")) {
		t.Errorf("err = %v, want the path, its owner and its mode named", err)
	}
	got, rerr := os.ReadFile(p)
	if rerr != nil || !bytes.Equal(got, content) {
		t.Errorf("regular file damaged: %q, %v", got, rerr)
	}
}

// A second listener on a held address fails with ErrInUse naming our pid;
// the first keeps its address and keeps delivering; once it stopped, the
// address can be taken again.
func testSecondInstance(t *testing.T, c Case) {
	e := start(t, c, c.NewURL(t), suiteOptions())
	u := e.l.URL()
	second, err := transport.Open(u, transport.Deps{Root: metrics.New(nil), Sink: sink.New(NewCapture(), sink.Options{}), Opts: suiteOptions()})
	if err == nil {
		second.Close()
		t.Fatalf("a second listener on %s was opened", u)
	}
	if !errors.Is(err, transport.ErrInUse) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("second Open: %v; want ErrInUse naming pid %d", err, os.Getpid())
	}
	var before, after unix.Stat_t
	if c.PathBased {
		if err := unix.Lstat(pathOf(t, u), &before); err != nil {
			t.Fatalf("the first listener's path is gone after the refused second: %v", err)
		}
	}
	w := e.dial(c)
	send(t, w, "still 000000")
	w.Close()
	recs := e.waitRecords(c, 1)
	if !c.Lossy && (len(recs) != 1 || recs[0].Message != "still 000000") {
		t.Fatalf("first listener after a refused second: %+v", recs)
	}
	if c.PathBased {
		if err := unix.Lstat(pathOf(t, u), &after); err != nil || after.Ino != before.Ino {
			t.Fatalf("the first listener's socket was replaced or removed: %v", err)
		}
	}
	if err := e.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	third, err := transport.Open(u, transport.Deps{Root: metrics.New(nil), Sink: sink.New(NewCapture(), sink.Options{}), Opts: suiteOptions()})
	if err != nil {
		t.Fatalf("Open after the holder stopped: %v", err)
	}
	third.Close()
}

// nobody is the uid and gid of the user "nobody" on Debian.
const nobody = 65534

// A socket or FIFO of another user at the path is never removed: Open
// fails with ErrForeign naming the owner, and the file stays.
func testForeignOwner(t *testing.T, c Case) {
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "needs root to give a file to another user")
	}
	raw := c.NewURL(t)
	p := pathOf(t, raw)
	if c.Transport == "fifo" {
		if err := unix.Mkfifo(p, 0o666); err != nil {
			t.Fatal(err)
		}
	} else {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = unix.Bind(fd, &unix.SockaddrUnix{Name: p})
		unix.Close(fd) // the file stays: a live socket of another user, or a stale one
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Lchown(p, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	var before unix.Stat_t
	if err := unix.Lstat(p, &before); err != nil {
		t.Fatal(err)
	}
	l, err := transport.Open(raw, transport.Deps{Root: metrics.New(nil), Sink: sink.New(NewCapture(), sink.Options{}), Opts: suiteOptions()})
	if err == nil {
		l.Close()
		t.Fatalf("Open over another user's %s succeeded", p)
	}
	if !errors.Is(err, transport.ErrForeign) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "65534") {
		t.Errorf("err = %v; want ErrForeign naming %s and its owner (uid 65534)", err, p)
	}
	var after unix.Stat_t
	if err := unix.Lstat(p, &after); err != nil || after.Ino != before.Ino || after.Uid != nobody {
		t.Errorf("another user's file was removed or replaced: %v", err)
	}
}

// Modes and groups are applied exactly, whatever the umask.
func testPerms(t *testing.T, c Case) {
	old := unix.Umask(0o077) // would turn 0660 into 0600
	defer unix.Umask(old)
	o := suiteOptions()
	o.SocketMode = 0o660
	wantGID := -1
	if os.Geteuid() == 0 {
		o.SocketGID, wantGID = nobody, nobody
	}
	e := start(t, c, c.NewURL(t), o)
	var st unix.Stat_t
	if c.Stat != nil {
		st = c.Stat(t, e.l.URL())
	} else if err := unix.Lstat(pathOf(t, e.l.URL()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o660 {
		t.Errorf("mode %#o, want 0660 (umask 0077)", st.Mode&0o7777)
	}
	if wantGID >= 0 && int(st.Gid) != wantGID {
		t.Errorf("gid %d, want %d", st.Gid, wantGID)
	}
}

// CountFDs is the number of open file descriptors of this process.
func CountFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func testLeaks(t *testing.T, c Case) {
	runtime.GC()
	fds0, g0 := CountFDs(t), runtime.NumGoroutine()
	e := start(t, c, c.NewURL(t), suiteOptions())
	const cycles = 200
	for i := range cycles {
		w := e.dial(c)
		send(t, w, fmt.Sprintf("leak %06d", i))
		w.Close()
	}
	recs := e.waitRecords(c, cycles)
	if !c.Lossy && len(recs) != cycles {
		t.Fatalf("got %d records, want %d", len(recs), cycles)
	}
	// Connections are gone from the listener's books once their peers left.
	testenv.Poll(t, waitFor, "the connections gauge at 0 after all senders closed", func() (float64, bool) {
		g := e.gauge(e.m.Connections)
		return g, g == 0
	})
	if err := e.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	testenv.Poll(t, waitFor, "fds and goroutines back where they were", func() (string, bool) {
		fds, g := CountFDs(t), runtime.NumGoroutine()
		return fmt.Sprintf("fds %d -> %d, goroutines %d -> %d", fds0, fds, g0, g), fds <= fds0 && g <= g0
	})
}

func threadCount(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// testIdleConnsNoThreads: idle connections cost no OS thread (they used
// to cost one each, and 10,300 aborted the daemon); records still flow on
// them, and the open-connections gauge follows them.
func testIdleConnsNoThreads(t *testing.T, c Case) {
	const n = 200
	o := suiteOptions()
	o.MaxConns = 0
	e := start(t, c, c.NewURL(t), o)
	w0 := e.dial(c)
	send(t, w0, "first")
	e.waitRecords(c, 1)
	before := threadCount(t)
	var ws []io.WriteCloser
	for range n {
		ws = append(ws, e.dial(c))
	}
	waitUntil(t, "the connections counted", func() bool { return e.gauge(e.m.Connections) == n+1 })
	if after := threadCount(t); after > before+4 {
		t.Errorf("%d threads with %d more idle connections, %d before", after, n, before)
	}
	send(t, ws[n/2], "from an idle connection")
	recs := e.waitRecords(c, 2)
	if recs[1].Message != "from an idle connection" {
		t.Errorf("record %q", recs[1].Message)
	}
	for _, w := range ws {
		w.Close()
	}
	w0.Close()
	waitUntil(t, "the connections closed", func() bool { return e.gauge(e.m.Connections) == 0 })
}

// testLimitWaits: at MaxConns the listener stops accepting; a client
// beyond the limit waits (in the backlog, or in its dial) with what it
// writes, and its record arrives once a slot frees. Nothing is accepted
// and dropped.
func testLimitWaits(t *testing.T, c Case) {
	o := suiteOptions()
	o.MaxConns = 2
	e := start(t, c, c.NewURL(t), o)
	a, b := e.dial(c), e.dial(c)
	defer b.Close()
	waitUntil(t, "two connections", func() bool { return e.gauge(e.m.Connections) == 2 })
	third := make(chan error, 1)
	go func() {
		// A shm client's dial itself waits for the ring (the accept).
		w, err := c.Dial(e.l.URL())
		if err == nil {
			_, err = io.WriteString(w, "waited for a slot\n")
			w.Close()
		}
		third <- err
	}()
	// A window, not an order: a wrong implementation would accept within
	// it; a right one never does, so nothing can be waited for.
	time.Sleep(100 * time.Millisecond)
	if got := e.counter(e.m.Accepted); got != 2 {
		t.Fatalf("accepted %v connections at MaxConns 2", got)
	}
	if e.cap.Len() != 0 {
		t.Fatalf("a record arrived while every slot was taken")
	}
	a.Close() // frees a slot
	if err := <-third; err != nil {
		t.Fatalf("the waiting client: %v", err)
	}
	recs := e.waitRecords(c, 1)
	if recs[0].Message != "waited for a slot" {
		t.Errorf("record %q", recs[0].Message)
	}
	if d := e.dropped(); d != 0 {
		t.Errorf("dropped_total = %v", d)
	}
}

// testFDsShortWaits: a listener short of file descriptors accepts
// nothing it cannot serve. It used to accept a connection with the last
// descriptor and drop it when the next one it needed failed (a duplicate
// of the socket, a shm ring's memfd): the client was told "sent" and its
// records were gone.
//
//   - With exactly one descriptor left for the listener, a client that
//     connects is served or waits; its record arrives once descriptors
//     are back, never lost.
//   - With none left, a client that connects waits (in the backlog, or in
//     its dial for shm) with what it writes: nothing is accepted, no
//     record arrives, and the time is counted in
//     accept_paused_seconds_total{cause="fds"}; once descriptors free up
//     it is accepted and its record arrives.
func testFDsShortWaits(t *testing.T, c Case) {
	o := suiteOptions()
	o.MaxConns = 0
	e := start(t, c, c.NewURL(t), o)
	w0 := e.dial(c)
	defer w0.Close()
	send(t, w0, "before")
	e.waitRecords(c, 1)
	waitUntil(t, "the listener waiting for its next connection", acceptParked)

	fds := NewFDFiller(t)
	dialBg := func(msg string) <-chan error {
		res := make(chan error, 1)
		go func() {
			// Kept open until the end: closing it would free its descriptor.
			w, err := c.Dial(e.l.URL())
			if err == nil {
				t.Cleanup(func() { w.Close() })
				_, err = io.WriteString(w, msg+"\n")
			}
			res <- err
		}()
		return res
	}

	want := []string{"before"}
	// One descriptor for the client, one for the listener. Not for shm:
	// a client in this process needs a third for the ring it receives
	// (package shm runs this case with a producer process).
	if c.Transport != "shm" {
		fds.Fill()
		fds.Free(2)
		if err := <-dialBg("one descriptor left"); err != nil {
			t.Fatalf("client with one descriptor left: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // give a wrong implementation time to accept and drop it
		fds.Release()
		want = append(want, "one descriptor left")
		e.waitRecords(c, len(want))
		waitUntil(t, "the listener waiting for its next connection", acceptParked)
	}

	// None for the listener.
	accepted := e.counter(e.m.Accepted)
	paused := e.counter(e.m.AcceptPaused, metrics.PauseFDs)
	fds.Fill()
	fds.Free(1)
	none := dialBg("no descriptor left")
	if c.Transport != "shm" {
		if err := <-none; err != nil {
			t.Fatalf("client with no descriptor left: %v", err)
		}
	}
	waitUntil(t, "the paused time counted", func() bool { return e.counter(e.m.AcceptPaused, metrics.PauseFDs) > paused })
	time.Sleep(100 * time.Millisecond)
	if got := e.counter(e.m.Accepted); got != accepted {
		t.Fatalf("accepted %v connections with no descriptor left", got-accepted)
	}
	if e.cap.Len() != len(want) {
		t.Fatalf("a record arrived with no descriptor left")
	}
	fds.Release()
	if c.Transport == "shm" {
		if err := <-none; err != nil {
			t.Fatalf("client with no descriptor left: %v", err)
		}
	}
	want = append(want, "no descriptor left")
	recs := e.waitRecords(c, len(want))
	var got []string
	for _, r := range recs {
		got = append(got, r.Message)
	}
	if !slices.Equal(got, want) {
		t.Errorf("records %q, want %q", got, want)
	}
	if d := e.dropped(); d != 0 {
		t.Errorf("dropped_total = %v", d)
	}

	// At the stop, a client still waiting in the backlog is accepted and
	// drained as descriptors come back, until the drain deadline. (A shm
	// client waiting there has written nothing yet.)
	if c.Transport == "shm" {
		return
	}
	waitUntil(t, "the listener waiting for its next connection", acceptParked)
	fds.Fill()
	fds.Free(1)
	if err := <-dialBg("waiting at the stop"); err != nil {
		t.Fatalf("client waiting at the stop: %v", err)
	}
	back := time.AfterFunc(200*time.Millisecond, fds.Release) // within DrainGrace
	defer back.Stop()
	if err := e.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	recs = e.records()
	if n := len(recs); n != len(want)+1 || recs[n-1].Message != "waiting at the stop" {
		t.Errorf("%d records after the stop, the last %q; want the waiting client's", n, recs[n-1].Message)
	}
}

// acceptParked reports whether a listener's accept goroutine waits in the
// netpoller for a connection (a stream listener, or shm's).
func acceptParked() bool {
	return testenv.Blocked("stream.ServeListener", "IO wait")+testenv.Blocked("shm.(*Listener).accept", "IO wait")+
		testenv.Blocked("otlp.(*connListener).Accept", "IO wait") > 0
}

// FDFiller takes this process's file descriptors: the soft RLIMIT_NOFILE
// is lowered to a few hundred above those open (restored at the end of the
// test), and Fill opens /dev/null up to it.
type FDFiller struct {
	t    testing.TB
	orig unix.Rlimit
	mu   sync.Mutex
	held []int
}

// NewFDFiller lowers the limit; nothing is taken until Fill.
func NewFDFiller(t testing.TB) *FDFiller {
	f := &FDFiller{t: t}
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &f.orig); err != nil {
		t.Fatal(err)
	}
	// Room above the gate's reserve, so that once filled and released
	// the listener has enough again.
	lim := f.orig
	lim.Cur = min(uint64(CountFDs(t)+2*transport.DefaultFDReserve+64), f.orig.Cur)
	if err := unix.Prlimit(0, unix.RLIMIT_NOFILE, &lim, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Release()
		unix.Prlimit(0, unix.RLIMIT_NOFILE, &f.orig, nil)
	})
	return f
}

// Fill opens /dev/null until EMFILE.
func (f *FDFiller) Fill() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			if !errors.Is(err, unix.EMFILE) {
				f.t.Fatalf("fill descriptors: %v", err)
			}
			return
		}
		f.held = append(f.held, fd)
	}
}

// Free closes n of the descriptors Fill took.
func (f *FDFiller) Free(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range min(n, len(f.held)) {
		k := len(f.held) - 1
		unix.Close(f.held[k])
		f.held = f.held[:k]
	}
}

// Release closes every descriptor Fill took.
func (f *FDFiller) Release() { f.Free(1 << 30) }

// testIdleTimeout: a connection that sends nothing for IdleTimeout is
// closed and its slot freed; records sent before are kept.
func testIdleTimeout(t *testing.T, c Case) {
	o := suiteOptions()
	o.IdleTimeout = 300 * time.Millisecond
	e := start(t, c, c.NewURL(t), o)
	w := e.dial(c)
	defer w.Close()
	send(t, w, "then silence")
	e.waitRecords(c, 1)
	waitUntil(t, "the idle connection closed", func() bool { return e.gauge(e.m.Connections) == 0 })
}

// testPartialBudget: connections holding incomplete frames share one
// budget; past it the largest are written out flagged truncated, the rest
// of each frame follows flagged continuation, and no byte is lost.
func testPartialBudget(t *testing.T, c Case) {
	const conns, part = 8, 48 << 10
	o := suiteOptions()
	o.MaxConns = 0
	o.MaxPartialBytes = 128 << 10 // room for two of the eight
	e := start(t, c, c.NewURL(t), o)
	var ws []io.WriteCloser
	for i := range conns {
		w := e.dial(c)
		defer w.Close()
		if _, err := io.WriteString(w, fmt.Sprintf("c%d %s", i, pad(part))); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	waitUntil(t, "partial frames written out by the budget", func() bool {
		return e.counter(e.m.DecodeErrors, metrics.KindTruncated) >= conns-2
	})
	for i, w := range ws {
		if _, err := io.WriteString(w, fmt.Sprintf(" end%d\n", i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range ws {
		w.Close()
	}
	waitUntil(t, "every connection's bytes", func() bool {
		recs := e.records()
		total := 0
		for _, r := range recs {
			total += len(r.Message)
		}
		return total >= conns*(part+3)+conns*5
	})
	byConn := map[string]string{}
	for _, r := range e.records() {
		if strings.HasPrefix(r.Message, "c") {
			id := r.Message[:strings.IndexByte(r.Message, ' ')]
			byConn[id] += r.Message
			continue
		}
		// a continuation: the tail of one of the frames
		for id, have := range byConn {
			if !strings.Contains(have, " end") && strings.HasSuffix(r.Message, " end"+id[1:]) {
				byConn[id] += r.Message
				break
			}
		}
	}
	for i := range conns {
		id := fmt.Sprintf("c%d", i)
		if want := id + " " + pad(part) + " end" + id[1:]; byConn[id] != want {
			t.Errorf("connection %d: %d bytes reassembled, want %d", i, len(byConn[id]), len(want))
		}
	}
}

func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, waitFor, what, cond)
}
