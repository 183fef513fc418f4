package stdin

import (
	"context"
	"errors"
	"fmt"
	"github.com/ipclab/logagg/internal/sink"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

func deps(c *transporttest.Capture) transport.Deps {
	o := transport.DefaultOptions()
	o.DrainGrace = time.Second
	return transport.Deps{Sink: sink.New(c, sink.Options{BatchBytes: 16 << 10}), Opts: o, Metrics: metrics.New(nil).ForListener("stdin://")}
}

func waitLen(t *testing.T, c *transporttest.Capture, n int) []transporttest.Rec {
	t.Helper()
	testenv.Poll(t, 30*time.Second, fmt.Sprintf("%d records", n), func() (string, bool) {
		got := c.Len()
		return fmt.Sprintf("%d of %d records", got, n), got >= n
	})
	recs, err := c.Records()
	if err != nil {
		t.Fatal(err)
	}
	if errs := c.Errors(); len(errs) > 0 {
		t.Fatalf("malformed batches: %v", errs)
	}
	return recs
}

func TestPipeUntilEOF(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := transporttest.NewCapture()
	l, err := NewFile(r, deps(c))
	if err != nil {
		t.Fatal(err)
	}
	if !l.pollable {
		t.Fatal("a pipe should be read through the poller")
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(context.Background()) }()
	const n = 1000
	go func() {
		var b strings.Builder
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "line %d\n", i)
		}
		b.WriteString("tail without newline")
		w.WriteString(b.String())
		w.Close()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run at EOF: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return at EOF")
	}
	recs := waitLen(t, c, n+1)
	if len(recs) != n+1 {
		t.Fatalf("got %d records, want %d", len(recs), n+1)
	}
	for i := 0; i < n; i++ {
		if recs[i].Message != fmt.Sprintf("line %d", i) || recs[i].Agg.Transport != "stdin" || recs[i].Agg.Listener != "stdin://" {
			t.Fatalf("record %d = %+v", i, recs[i])
		}
	}
	last := recs[n]
	if last.Message != "tail without newline" || !last.HasFlag("partial") {
		t.Errorf("last record = %q flags %v, want the tail flagged partial", last.Message, last.Agg.Flags)
	}
	// The original fd's blocking mode is restored.
	if fl, err := unix.FcntlInt(r.Fd(), unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK != 0 {
		t.Errorf("flags after Close = %o, %v: O_NONBLOCK left set", fl, err)
	}
}

func TestCancelDrainsWhatIsBuffered(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close() // the writer stays open: no EOF, only ctx ends Run
	c := transporttest.NewCapture()
	l, err := NewFile(r, deps(c))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	w.WriteString("a\nb\n")
	waitLen(t, c, 2)
	// Block the pipeline so the next lines stay in the pipe until the
	// drain, then cancel: they must still arrive.
	c.Block()
	w.WriteString("c\nd\npartial")
	cancel()
	time.AfterFunc(100*time.Millisecond, c.Unblock)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	recs := waitLen(t, c, 5)
	var got []string
	for _, r := range recs {
		got = append(got, r.Message)
	}
	if strings.Join(got, ",") != "a,b,c,d,partial" || !recs[4].HasFlag("partial") {
		t.Errorf("records = %v (last flags %v)", got, recs[len(recs)-1].Agg.Flags)
	}
}

func TestRegularFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(p, []byte("{\"message\":\"one\"}\ntwo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := transporttest.NewCapture()
	l, err := NewFile(f, deps(c))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs := waitLen(t, c, 2)
	if recs[0].Message != "one" || recs[0].Agg.Format != "json" || recs[1].Message != "two" {
		t.Errorf("records = %+v", recs)
	}
}

func TestURLValidation(t *testing.T) {
	for _, raw := range []string{"stdin://", "stdin:///", "stdin:"} {
		u, _ := url.Parse(raw)
		l, err := New(u, deps(transporttest.NewCapture()))
		if err != nil {
			t.Errorf("%s: %v", raw, err)
			continue
		}
		l.Close()
	}
	for _, raw := range []string{"stdin://host", "stdin:///dev/tty", "stdin://?x=1"} {
		u, _ := url.Parse(raw)
		if _, err := New(u, deps(transporttest.NewCapture())); !errors.Is(err, transport.ErrBadAddress) {
			t.Errorf("%s: err = %v, want ErrBadAddress", raw, err)
		}
	}
}
