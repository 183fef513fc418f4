package shm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/sink"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/seqstamp"
	"github.com/ipclab/logagg/internal/shmring"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

// The test binary doubles as a producer process (helper-process pattern):
// LOGAGG_SHM_PRODUCER=path,count,id makes it write count stamped records
// (count < 0: forever) to the shm listener at path and exit.
func TestMain(m *testing.M) {
	if spec := os.Getenv("LOGAGG_SHM_PRODUCER"); spec != "" {
		os.Exit(produce(spec))
	}
	if path := os.Getenv("LOGAGG_SHM_FLOOD"); path != "" {
		os.Exit(flood(path))
	}
	os.Exit(m.Run())
}

// flood is a hostile producer: it takes a ring and then writes wake-up
// bytes to the control socket as fast as it can, publishing nothing.
func flood(path string) int {
	c, err := net.Dial("unix", path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	buf := make([]byte, 64)
	c.Read(buf) // the hello with the ring's fd
	os.Stdout.WriteString("ready\n")
	b := []byte{'w'}
	for {
		if _, err := c.Write(b); err != nil {
			return 0
		}
	}
}

const pad = "the quick brown fox jumps over the lazy dog"

func stamped(dst []byte, id string, seq uint64) []byte {
	dst = seqstamp.AppendText(dst, seqstamp.Stamp{Producer: id, Seq: seq})
	dst = append(dst, ' ')
	return append(dst, pad...)
}

func produce(spec string) int {
	parts := strings.Split(spec, ",")
	count, _ := strconv.Atoi(parts[1])
	if os.Getenv("LOGAGG_SHM_WAIT") != "" {
		// Dial only once told to (a line on stdin): the test starts us
		// before it takes its own descriptors, and a start needs some.
		var b [1]byte
		os.Stdin.Read(b[:])
	}
	w, err := shmring.Dial(parts[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	os.Stdout.WriteString("ready\n")
	var buf []byte
	for i := 0; count < 0 || i < count; i++ {
		buf = stamped(buf[:0], parts[2], uint64(i))
		if err := w.Write(buf); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
	}
	w.Close()
	return 0
}

type harness struct {
	l      *Listener
	cap    *transporttest.Capture
	path   string
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, query string, opts func(*transport.Options)) *harness {
	t.Helper()
	dir, err := os.MkdirTemp("", "lg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "c.sock")
	o := transport.DefaultOptions()
	if opts != nil {
		opts(&o)
	}
	c := transporttest.NewCapture()
	raw := "shm://" + path + query
	ln, err := transport.Open(raw, transport.Deps{Root: metrics.New(nil), Sink: sink.New(c, sink.Options{}), Opts: o})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{l: ln.(*Listener), cap: c, path: path, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- ln.Run(ctx) }()
	t.Cleanup(func() { h.stop(t) })
	return h
}

func (h *harness) stop(t *testing.T) {
	t.Helper()
	h.cancel()
	select {
	case err, ok := <-h.done:
		if ok && err != nil {
			t.Errorf("Run: %v", err)
		}
		if ok {
			close(h.done)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func (h *harness) liveConns() int {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	return len(h.l.conns)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, what, cond)
}

func spawn(t *testing.T, path string, count int, id string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("LOGAGG_SHM_PRODUCER=%s,%d,%s", path, count, id))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// seqs checks every captured record of producer id is an intact stamped
// record and returns how often each sequence number arrived.
func seqs(t *testing.T, c *transporttest.Capture, id string) (map[uint64]int, []transporttest.Rec) {
	t.Helper()
	recs, err := c.Records()
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint64]int{}
	var mine []transporttest.Rec
	for _, r := range recs {
		s, ok := seqstamp.Find(r.Raw)
		if !ok || s.Producer != id {
			continue
		}
		if want := string(stamped(nil, id, s.Seq)); r.Message != want {
			t.Fatalf("torn or altered record: %q, want %q", r.Message, want)
		}
		got[s.Seq]++
		mine = append(mine, r)
	}
	if errs := c.Errors(); len(errs) > 0 {
		t.Fatalf("malformed batches: %v", errs)
	}
	return got, mine
}

func TestExactlyOnceFromChildProcess(t *testing.T) {
	h := start(t, "?size=64KiB", nil)
	const n = 30000
	cmd := spawn(t, h.path, n, "child1")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("producer: %v", err)
	}
	waitFor(t, "all records", func() bool { return h.cap.Len() >= n })
	waitFor(t, "producer released", func() bool { return h.liveConns() == 0 })
	got, recs := seqs(t, h.cap, "child1")
	for i := uint64(0); i < n; i++ {
		if got[i] != 1 {
			t.Fatalf("seq %d arrived %d times", i, got[i])
		}
	}
	if len(recs) != n {
		t.Fatalf("%d records, want %d", len(recs), n)
	}
	r := recs[0]
	if r.Agg.Transport != "shm" || r.Agg.Peer == nil || r.Agg.Peer.PID == nil ||
		int(*r.Agg.Peer.PID) != cmd.Process.Pid || r.Agg.Peer.Via != "kernel" || *r.Agg.Peer.UID != uint32(os.Getuid()) {
		t.Fatalf("bad metadata %s (child pid %d)", r.Raw, cmd.Process.Pid)
	}
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func countRingMaps(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("memfd:logagg-shm"))
}

// Producers SIGKILLed mid-stream and producers connecting and leaving
// in-process: the listener keeps serving, no torn record appears, each
// killed producer's records form a gap-free prefix, and every fd and ring
// mapping is released: while the listener runs, one ring is left, the
// next producer's, made before it is accepted; after Run, none.
func TestKilledProducersNoTornRecordsNoLeaks(t *testing.T) {
	h := start(t, "?size=16KiB&spin=100", nil)
	waitFor(t, "the next producer's ring", func() bool { return countRingMaps(t) == 1 })
	baseFDs, baseMaps := countFDs(t), countRingMaps(t)
	for k := 0; k < 4; k++ {
		id := fmt.Sprintf("kill%d", k)
		before := h.cap.Len()
		cmd := spawn(t, h.path, -1, id)
		waitFor(t, "records from "+id, func() bool { return h.cap.Len() > before+2000 })
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		waitFor(t, "ring of killed producer released", func() bool { return h.liveConns() == 0 })
		got, _ := seqs(t, h.cap, id)
		for i := uint64(0); i < uint64(len(got)); i++ {
			if got[i] != 1 {
				t.Fatalf("%s: seq %d arrived %d times (of %d seqs)", id, i, got[i], len(got))
			}
		}
	}
	for k := 0; k < 30; k++ {
		w, err := shmring.Dial(h.path)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(stamped(nil, "inproc", uint64(k))); err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
	waitFor(t, "in-process records", func() bool { g, _ := seqs(t, h.cap, "inproc"); return len(g) == 30 })
	waitFor(t, "fds and mappings back to baseline", func() bool {
		return h.liveConns() == 0 && countFDs(t) <= baseFDs && countRingMaps(t) == baseMaps
	})
	h.stop(t)
	if n := countRingMaps(t); n != 0 {
		t.Fatalf("%d ring mappings left after Run", n)
	}
}

// With one descriptor left for the listener, a producer that connects is
// served: its ring was made before it was accepted. The listener used to
// accept it with that descriptor, fail to create the ring (EMFILE) and
// close the connection. The producer is another process, with
// descriptors of its own for the ring it receives (the conformance suite
// runs the other short-descriptor cases in process).
func TestOneDescriptorLeftProducerServed(t *testing.T) {
	h := start(t, "?size=16KiB&spin=100", nil)
	waitFor(t, "the listener waiting in accept", func() bool { return testenv.Blocked("shm.(*Listener).accept", "IO wait") == 1 })
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("LOGAGG_SHM_PRODUCER=%s,%d,%s", h.path, 100, "onefd"), "LOGAGG_SHM_WAIT=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fds := transporttest.NewFDFiller(t)
	fds.Fill()
	fds.Free(1)
	stdin.Write([]byte("\n"))
	var exitErr error
	select {
	case exitErr = <-exited:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		exitErr = <-exited
	}
	fds.Release()
	if exitErr != nil {
		t.Fatalf("producer with one descriptor left for the listener: %v\n%s", exitErr, stderr.String())
	}
	waitFor(t, "the producer's records", func() bool { g, _ := seqs(t, h.cap, "onefd"); return len(g) == 100 })
}

// Shutdown with full rings and a blocked pipeline: every record whose
// Write succeeded is submitted before Run returns; later Writes fail with
// ErrClosed; the socket file is removed.
func TestShutdownDrainsFullRings(t *testing.T) {
	h := start(t, "?size=4KiB&spin=10", nil)
	h.cap.Block()
	const producers = 3
	type result struct {
		p, ok int // producer, successful Writes
		err   error
	}
	results := make(chan result, producers)
	for p := 0; p < producers; p++ {
		w, err := shmring.Dial(h.path)
		if err != nil {
			t.Fatal(err)
		}
		go func(p int) {
			defer w.Close()
			var buf []byte
			for i := 0; ; i++ {
				buf = stamped(buf[:0], fmt.Sprintf("full%d", p), uint64(i))
				if err := w.Write(buf); err != nil {
					results <- result{p, i, err}
					return
				}
			}
		}(p)
	}
	// All pipelines blocked and all rings full: each producer goroutine
	// is parked in Write.
	waitFor(t, "blocked submits", func() bool { return h.cap.Waiting() == producers })
	waitFor(t, "every writer waiting for space in its full ring", func() bool {
		return testenv.Blocked("shmring.(*Writer).reserve", "syscall") == producers
	})
	h.cancel()
	h.cap.Unblock()
	h.stop(t)
	okWrites := map[int]int{}
	for p := 0; p < producers; p++ {
		r := <-results
		if !errors.Is(r.err, shmring.ErrClosed) {
			t.Fatalf("writer ended with %v, want ErrClosed", r.err)
		}
		okWrites[r.p] = r.ok
	}
	for p := 0; p < producers; p++ {
		got, _ := seqs(t, h.cap, fmt.Sprintf("full%d", p))
		if len(got) != okWrites[p] || okWrites[p] == 0 {
			t.Fatalf("producer %d: %d records submitted, %d Writes succeeded", p, len(got), okWrites[p])
		}
		for i := uint64(0); i < uint64(len(got)); i++ {
			if got[i] != 1 {
				t.Fatalf("producer %d: seq %d arrived %d times", p, i, got[i])
			}
		}
	}
	if _, err := os.Lstat(h.path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("control socket left behind: %v", err)
	}
	h.stop(t)
	if n := countRingMaps(t); n != 0 {
		t.Fatalf("%d ring mappings left after Run", n)
	}
}

func TestTooLargeRefusedLongTruncated(t *testing.T) {
	h := start(t, "?size=64KiB", func(o *transport.Options) { o.MaxRecord = 1000 })
	w, err := shmring.Dial(h.path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.MaxFrame() != 64<<10-12 {
		t.Fatalf("MaxFrame %d, want ring size - 12", w.MaxFrame())
	}
	if err := w.Write(make([]byte, 64<<10)); !errors.Is(err, shmring.ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	// A record longer than --max-record is kept in pieces, flagged.
	if err := w.Write(bytes.Repeat([]byte("b"), 1500)); err != nil {
		t.Fatal(err)
	}
	// Several records in one frame (RFC 7464), and a multi-line record.
	if err := w.Write([]byte("\x1eone\n\x1etwo\n\x1e\n\x1ethree")); err != nil {
		t.Fatal(err)
	}
	if err := w.Write([]byte("multi\nline\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "records", func() bool { return h.cap.Len() == 6 })
	recs, _ := h.cap.Records()
	if len(recs[0].Message) != 1000 || !recs[0].HasFlag("truncated") || len(recs[1].Message) != 500 || !recs[1].HasFlag("continuation") {
		t.Fatalf("long record: len %d flags %v, then len %d flags %v", len(recs[0].Message), recs[0].Agg.Flags, len(recs[1].Message), recs[1].Agg.Flags)
	}
	if recs[2].Message != "one" || recs[3].Message != "two" || recs[4].Message != "three" || recs[5].Message != "multi\nline" {
		t.Fatalf("split records: %q %q %q %q", recs[2].Message, recs[3].Message, recs[4].Message, recs[5].Message)
	}
}

func TestBadURLs(t *testing.T) {
	dir, _ := os.MkdirTemp("", "lg")
	defer os.RemoveAll(dir)
	reg := filepath.Join(dir, "regular")
	os.WriteFile(reg, nil, 0o600)
	for raw, want := range map[string]error{
		"shm://" + dir + "/a.sock?size=5000": transport.ErrBadAddress,
		"shm://" + dir + "/a.sock?bogus=1":   transport.ErrBadAddress,
		"shm://" + dir + "/a.sock?spin=-3":   transport.ErrBadAddress,
		"shm://":                             transport.ErrBadAddress,
		"shm://" + reg:                       transport.ErrNotSocket,
	} {
		_, err := transport.Open(raw, transport.Deps{Sink: sink.New(transporttest.NewCapture(), sink.Options{}), Opts: transport.DefaultOptions()})
		if !errors.Is(err, want) {
			t.Errorf("%s: got %v, want %v", raw, err, want)
		}
	}
	u, _ := url.Parse("shm:///x.sock?size=1MiB&spin=0")
	if _, cfg, err := ParseURL(u); err != nil || cfg.Size != 1<<20 || cfg.Spin != -1 {
		t.Fatalf("ParseURL: %+v %v", cfg, err)
	}
}

// processCPU is this process's user+system CPU time so far.
func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func threads(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// An idle producer's ring is waited on in the netpoller: 200 idle rings
// add no OS threads (one each before).
func TestIdleRingsHoldNoThread(t *testing.T) {
	h := start(t, "?size=16KiB", nil)
	waitFor(t, "the listener waiting for producers", func() bool {
		return testenv.Blocked("shm.(*Listener).accept", "IO wait") == 1
	})
	before := threads(t)
	var ws []*shmring.Writer
	for range 200 {
		w, err := shmring.Dial(h.path)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	for i, w := range ws {
		if err := w.Write([]byte(fmt.Sprintf("hello %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "200 records", func() bool { return h.cap.Len() == 200 })
	waitFor(t, "every reader back waiting in the netpoller", func() bool {
		return testenv.Blocked("shm.(*Listener).serve", "IO wait") == 200
	})
	if after := threads(t); after > before+4 {
		t.Errorf("threads %d -> %d with 200 idle shm producers", before, after)
	}
	for _, w := range ws {
		w.Close()
	}
}

// A producer that floods the control socket with wake-up bytes and
// publishes nothing costs the reader a few percent of a CPU at most.
func TestWakeFloodIsThrottled(t *testing.T) {
	h := start(t, "?size=16KiB", nil)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LOGAGG_SHM_FLOOD="+h.path)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var b [6]byte
	if _, err := out.Read(b[:]); err != nil || string(b[:5]) != "ready" {
		t.Fatalf("flooder did not start: %q %v", b, err)
	}
	waitFor(t, "the reader throttling the wake-ups", func() bool {
		return testenv.Blocked("shm.(*ctlWaiter).throttle", "sleep") > 0
	})
	cpu0, t0 := processCPU(t), time.Now()
	time.Sleep(2 * time.Second) // the measurement: CPU used over 2 s of flood
	share := float64(processCPU(t)-cpu0) / float64(time.Since(t0))
	t.Logf("reader's process used %.1f%% of a CPU during a wake-up flood", 100*share)
	if share > 0.05 {
		t.Errorf("a wake-up flood costs the reader %.1f%% of a CPU, want <= 5%%", 100*share)
	}
	// A well-behaved producer on the same listener is served meanwhile.
	w, err := shmring.Dial(h.path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Write([]byte("still served"))
	waitFor(t, "the good producer's record", func() bool { return h.cap.Len() == 1 })
}

// --idle-timeout closes a producer that sent nothing for that long: its
// next Write fails with ErrClosed, and its slot is free again.
func TestIdleTimeoutClosesProducer(t *testing.T) {
	h := start(t, "?size=16KiB", func(o *transport.Options) { o.IdleTimeout = 300 * time.Millisecond; o.MaxConns = 1 })
	w, err := shmring.Dial(h.path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Write([]byte("before idling")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the idle producer closed", func() bool {
		h.l.mu.Lock()
		defer h.l.mu.Unlock()
		return len(h.l.conns) == 0
	})
	if err := w.Write([]byte("x")); !errors.Is(err, shmring.ErrClosed) {
		t.Fatalf("Write after the idle timeout: %v, want ErrClosed", err)
	}
	w2, err := shmring.Dial(h.path) // the only slot is free again
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if err := w2.Write([]byte("next producer")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "records", func() bool { return h.cap.Len() >= 2 })
	recs, _ := h.cap.Records()
	if recs[0].Message != "before idling" || recs[len(recs)-1].Message != "next producer" {
		t.Errorf("records %q ... %q", recs[0].Message, recs[len(recs)-1].Message)
	}
}

// TestRunCancelledAtOnce: Run with its context already ended returns,
// however its accept goroutine and its wait are scheduled. When the
// accept goroutine had returned (at once: the context had ended) before
// Run waited, both were ready, and Run took the goroutine's result and
// then waited for it again, for ever: a CI run of the conformance suite's
// perms test, which stops the listener just after starting it, hung so.
// The hook makes Run wait until then, every time.
func TestRunCancelledAtOnce(t *testing.T) {
	testHookRunStarted = func() { time.Sleep(5 * time.Millisecond) }
	defer func() { testHookRunStarted = nil }()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 40 {
		raw := "shm://" + filepath.Join(dir, fmt.Sprintf("c%d.sock", i)) + "?size=64KiB"
		ln, err := transport.Open(raw, transport.Deps{Root: metrics.New(nil), Sink: sink.New(transporttest.NewCapture(), sink.Options{}),
			Opts: transport.DefaultOptions()})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- ln.Run(ctx) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("run %d: Run with an ended context did not return", i)
		}
	}
}
