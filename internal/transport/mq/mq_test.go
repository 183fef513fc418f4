package mq

import (
	"context"
	"errors"
	"fmt"
	"github.com/ipclab/logagg/internal/sink"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/mqueue"
	"github.com/ipclab/logagg/internal/seqstamp"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

// LOGAGG_MQ_PRODUCER=name,count,id makes the test binary a producer that
// sends count stamped records, one per message, and exits.
func TestMain(m *testing.M) {
	if spec := os.Getenv("LOGAGG_MQ_PRODUCER"); spec != "" {
		os.Exit(produce(spec))
	}
	os.Exit(m.Run())
}

func stamped(id string, seq uint64) []byte {
	b := seqstamp.AppendText(nil, seqstamp.Stamp{Producer: id, Seq: seq})
	return append(b, " hello over mq\n"...)
}

func produce(spec string) int {
	p := strings.Split(spec, ",")
	count, _ := strconv.Atoi(p[1])
	q, err := mqueue.Open(p[0], unix.O_WRONLY, 0, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for i := 0; i < count; i++ {
		if err := q.Send(stamped(p[2], uint64(i)), 0, -1); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
	}
	return 0
}

var seq int

func queueName() string {
	seq++
	return fmt.Sprintf("/logagg-test-%d-%d", os.Getpid(), seq)
}

func skipWithoutMqueue(t *testing.T) {
	if _, err := mqueue.ReadLimits(); err != nil {
		testenv.SkipOrFail(t, fmt.Sprintf("POSIX mqueue unavailable: %v", err))
	}
}

type harness struct {
	name   string
	cap    *transporttest.Capture
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, name string, opts transport.Options) *harness {
	t.Helper()
	skipWithoutMqueue(t)
	c := transporttest.NewCapture()
	ln, err := transport.Open("mq://"+name, transport.Deps{Root: metrics.New(nil), Sink: sink.New(c, sink.Options{}), Opts: opts})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{name: name, cap: c, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- ln.Run(ctx) }()
	t.Cleanup(func() { h.stop(t); mqueue.Unlink(name) })
	return h
}

func (h *harness) stop(t *testing.T) {
	t.Helper()
	h.cancel()
	select {
	case err, ok := <-h.done:
		if ok {
			close(h.done)
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, what, cond)
}

func check(t *testing.T, c *transporttest.Capture, id string, n int) {
	t.Helper()
	recs, err := c.Records()
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint64]int{}
	for _, r := range recs {
		s, ok := seqstamp.Find(r.Raw)
		if !ok || s.Producer != id {
			continue
		}
		if want := strings.TrimSuffix(string(stamped(id, s.Seq)), "\n"); r.Message != want {
			t.Fatalf("record %q, want %q", r.Message, want)
		}
		if r.Agg.Transport != "mq" || r.Agg.Peer != nil {
			t.Fatalf("bad metadata: %s", r.Raw)
		}
		got[s.Seq]++
	}
	for i := uint64(0); i < uint64(n); i++ {
		if got[i] != 1 {
			t.Fatalf("seq %d arrived %d times", i, got[i])
		}
	}
	if len(got) != n {
		t.Fatalf("%d distinct seqs, want %d", len(got), n)
	}
	if errs := c.Errors(); len(errs) > 0 {
		t.Fatalf("malformed batches: %v", errs)
	}
}

// A child process sends through a 10-message queue (it blocks whenever the
// queue is full): every record arrives exactly once.
func TestExactlyOnceFromChildProcess(t *testing.T) {
	name := queueName()
	h := start(t, name, transport.DefaultOptions())
	const n = 20000
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("LOGAGG_MQ_PRODUCER=%s,%d,c1", name, n))
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("producer: %v", err)
	}
	waitFor(t, "all records", func() bool { return h.cap.Len() >= n })
	check(t, h.cap, "c1", n)
}

// With the pipeline blocked the queue fills and senders block; on shutdown
// every message already queued is submitted and the queue is removed.
func TestShutdownDrainsAndUnlinks(t *testing.T) {
	name := queueName()
	h := start(t, name, transport.DefaultOptions())
	h.cap.Block()
	q, err := mqueue.Open(name, unix.O_WRONLY, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	sent := 0
	for {
		// Non-blocking-style send with a short deadline: ETIMEDOUT means full.
		err := q.Send(stamped("drain", uint64(sent)), 0, 100*time.Millisecond)
		if errors.Is(err, unix.ETIMEDOUT) && h.cap.Waiting() == 1 {
			break
		}
		if err == nil {
			sent++
		} else if !errors.Is(err, unix.ETIMEDOUT) {
			t.Fatal(err)
		}
		if sent > 100000 {
			t.Fatal("queue never filled")
		}
	}
	h.cancel()
	h.cap.Unblock()
	h.stop(t)
	check(t, h.cap, "drain", sent)
	if _, err := mqueue.Open(name, unix.O_WRONLY, 0, nil); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("queue still exists after shutdown: %v", err)
	}
}

// Several records in one message (RFC 7464), a message longer than
// --max-record, and a multi-line message.
func TestSplitAndTruncate(t *testing.T) {
	name := queueName()
	o := transport.DefaultOptions()
	o.MaxRecord = 100
	h := start(t, name, o)
	q, err := mqueue.Open(name, unix.O_WRONLY, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Send([]byte("\x1eone\n\x1etwo\n\x1e\n\x1ethree\n"), 0, -1); err != nil {
		t.Fatal(err)
	}
	if err := q.Send([]byte(strings.Repeat("x", 150)), 0, -1); err != nil {
		t.Fatal(err)
	}
	if err := q.Send([]byte("multi\nline\x00"), 0, -1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "records", func() bool { return h.cap.Len() == 6 })
	recs, _ := h.cap.Records()
	if recs[0].Message != "one" || recs[1].Message != "two" || recs[2].Message != "three" {
		t.Fatalf("split: %q %q %q", recs[0].Message, recs[1].Message, recs[2].Message)
	}
	if len(recs[3].Message) != 100 || !recs[3].HasFlag("truncated") || len(recs[4].Message) != 50 || !recs[4].HasFlag("continuation") {
		t.Fatalf("long record: len %d flags %v, then len %d flags %v", len(recs[3].Message), recs[3].Agg.Flags, len(recs[4].Message), recs[4].Agg.Flags)
	}
	if recs[5].Message != "multi\nline" {
		t.Fatalf("multi-line message: %q", recs[5].Message)
	}
}

func TestLimitErrors(t *testing.T) {
	skipWithoutMqueue(t)
	deps := func(maxRecord int) transport.Deps {
		o := transport.DefaultOptions()
		if maxRecord > 0 {
			o.MaxRecord = maxRecord
		}
		return transport.Deps{Sink: sink.New(transporttest.NewCapture(), sink.Options{}), Opts: o}
	}
	// An explicitly raised --max-record no queue can carry (beyond the
	// kernel's hard limit of 16 MiB, so even root is refused).
	name := queueName()
	_, err := transport.Open("mq://"+name, deps(32<<20))
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "--max-record") || !strings.Contains(err.Error(), "msgsize_max") {
		t.Fatalf("got %v, want ErrLimit naming --max-record and msgsize_max", err)
	}
	if _, err := mqueue.Open(name, unix.O_WRONLY, 0, nil); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("refused queue left behind: %v", err)
	}
	// An existing queue whose msgsize cannot carry an explicit --max-record.
	name = queueName()
	small, err := mqueue.Open(name, unix.O_CREAT|unix.O_RDONLY, 0o600, &mqueue.Attr{MaxMsg: 2, MsgSize: 512})
	if err != nil {
		t.Fatal(err)
	}
	small.Close()
	_, err = transport.Open("mq://"+name, deps(4096))
	mqueue.Unlink(name)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "msgsize is 512 ") {
		t.Fatalf("got %v, want ErrLimit for the existing 512-byte queue", err)
	}
	// An explicit ?msgsize= beyond any kernel limit (HARD_MSGSIZEMAX is 16 MiB).
	name = queueName()
	_, err = transport.Open("mq://"+name+"?msgsize=33554432", deps(0))
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "msgsize") {
		t.Fatalf("got %v, want ErrLimit", err)
	}
	// The default --max-record is bounded by msgsize instead.
	name = queueName()
	l, err := transport.Open("mq://"+name, deps(0))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := mqueue.Open(name, unix.O_WRONLY, 0, nil); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("Close did not remove the queue: %v", err)
	}
	for _, raw := range []string{"mq:///a/b", "mq://", "mq:///x?maxmsg=0", "mq:///x?foo=1"} {
		if _, err := transport.Open(raw, deps(0)); !errors.Is(err, transport.ErrBadAddress) {
			t.Errorf("%s: got %v, want ErrBadAddress", raw, err)
		}
	}
}

// squat creates name as a squatter would before the aggregator starts:
// mode 0666 (set through the descriptor, whatever the umask), a message
// already in it, owned by uid.
func squat(t *testing.T, name string, mode uint32, uid int) {
	t.Helper()
	q, err := mqueue.Open(name, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR, 0o600, &mqueue.Attr{MaxMsg: 10, MsgSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	t.Cleanup(func() { mqueue.Unlink(name) })
	if err := unix.Fchmod(q.FD(), mode); err != nil {
		t.Fatal(err)
	}
	if uid >= 0 {
		if err := unix.Fchown(q.FD(), uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Send([]byte("planted"), 0, -1); err != nil {
		t.Fatal(err)
	}
}

// A queue that exists before the aggregator starts is used only if it is
// ours and no more open than configured: a squatter's queue (or our own
// left world-writable) would let another user read or forge records. The
// refused queue is left as it is, message included.
func TestSquattedQueueRefused(t *testing.T) {
	skipWithoutMqueue(t)
	cases := []struct {
		name string
		mode uint32
		uid  int
		want string
	}{
		{"world-readable", 0o666, -1, "wider than the configured"},
		{"another user's", 0o600, 65534, "uid 65534"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.uid >= 0 && os.Geteuid() != 0 {
				testenv.SkipOrFail(t, "needs root to give a queue to another user")
			}
			name := queueName()
			squat(t, name, c.mode, c.uid)
			o := transport.DefaultOptions()
			l, err := transport.Open("mq://"+name, transport.Deps{Sink: sink.New(transporttest.NewCapture(), sink.Options{}), Opts: o})
			if err == nil {
				l.Close()
				t.Fatalf("a squatted queue (mode %#o, uid %d) was used", c.mode, c.uid)
			}
			if !errors.Is(err, transport.ErrForeign) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v; want ErrForeign naming %s and %q", err, name, c.want)
			}
			q, err := mqueue.Open(name, unix.O_RDONLY|unix.O_NONBLOCK, 0, nil)
			if err != nil {
				t.Fatalf("refused queue was removed: %v", err)
			}
			defer q.Close()
			if a, _ := q.Attr(); a.CurMsgs != 1 {
				t.Errorf("refused queue holds %d messages, want the planted 1", a.CurMsgs)
			}
		})
	}
	// Our own queue, left by a previous run with the configured mode, is
	// reused with its messages.
	name := queueName()
	squat(t, name, 0o600, -1)
	h := start(t, name, transport.DefaultOptions())
	waitFor(t, "the left message", func() bool { return h.cap.Len() == 1 })
}
