package capture

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/ipclab/logagg/internal/sink"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

type out struct {
	Event    string `json:"event"`
	Message  string `json:"message"`
	ExitCode *int   `json:"exit_code"`
	Signal   string `json:"signal"`
	PID      int    `json:"pid"`
	Agg      struct {
		Transport string   `json:"transport"`
		Listener  string   `json:"listener"`
		Stream    string   `json:"stream"`
		Flags     []string `json:"flags"`
		Peer      struct {
			PID int    `json:"pid"`
			UID int    `json:"uid"`
			GID int    `json:"gid"`
			Via string `json:"via"`
		} `json:"peer"`
	} `json:"agg"`
}

type run struct {
	c    *Child
	cap  *transporttest.Capture
	done chan error
}

// start binds and runs argv as the daemon does with a source.
func start(t *testing.T, ctx context.Context, argv ...string) *run {
	t.Helper()
	c, err := New(Command{Argv: argv})
	if err != nil {
		t.Fatal(err)
	}
	cp := transporttest.NewCapture()
	o := transport.DefaultOptions()
	o.DrainGrace = 300 * time.Millisecond
	if err := c.Bind(transport.Deps{Metrics: metrics.New(nil).ForListener(c.URL()), Sink: sink.New(cp, sink.Options{}), Opts: o}); err != nil {
		t.Fatalf("Bind(%s): %v", c.URL(), err)
	}
	r := &run{c: c, cap: cp, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() {
		c.Signal(syscall.SIGKILL)
		<-c.Done()
	})
	return r
}

func (r *run) wait(t *testing.T) []out {
	t.Helper()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	return r.records(t)
}

func (r *run) records(t *testing.T) []out {
	t.Helper()
	if errs := r.cap.Errors(); len(errs) > 0 {
		t.Fatalf("malformed batches: %v", errs)
	}
	recs, err := r.cap.Records()
	if err != nil {
		t.Fatal(err)
	}
	var res []out
	for _, rec := range recs {
		var o out
		if err := json.Unmarshal(rec.Raw, &o); err != nil {
			t.Fatalf("%s: %v", rec.Raw, err)
		}
		res = append(res, o)
	}
	return res
}

func byStream(recs []out) map[string][]out {
	m := map[string][]out{}
	for _, r := range recs {
		m[r.Agg.Stream] = append(m[r.Agg.Stream], r)
	}
	return m
}

func TestStdoutStderrPartialAndExit(t *testing.T) {
	r := start(t, context.Background(), "sh", "-c", "echo out; echo err >&2; printf partial; exit 3")
	recs := r.wait(t)
	pid := r.c.PID()
	s := byStream(recs)
	if len(s["stdout"]) != 2 || s["stdout"][0].Message != "out" || s["stdout"][1].Message != "partial" {
		t.Fatalf("stdout records = %+v", s["stdout"])
	}
	if f := s["stdout"][1].Agg.Flags; len(f) != 1 || f[0] != "partial" {
		t.Errorf("unterminated line flags = %v, want [partial]", f)
	}
	if len(s["stderr"]) != 1 || s["stderr"][0].Message != "err" {
		t.Fatalf("stderr records = %+v", s["stderr"])
	}
	for _, rec := range recs {
		p := rec.Agg.Peer
		if p.PID != pid || p.UID != os.Geteuid() || p.GID != os.Getegid() || p.Via != "kernel" || rec.Agg.Transport != "exec" || rec.Agg.Listener != r.c.URL() {
			t.Errorf("record %q: agg = %+v, want pid %d via kernel", rec.Message, rec.Agg, pid)
		}
	}
	last := recs[len(recs)-1]
	if last.Event != "exit" || last.ExitCode == nil || *last.ExitCode != 3 || last.Signal != "" || last.PID != pid || last.Agg.Stream != "" {
		t.Errorf("last record = %+v, want the exit record with code 3", last)
	}
	if st := r.c.Status(); !st.Exited || st.ExitCode() != 3 {
		t.Errorf("status = %+v", st)
	}
}

func TestSignalIsDeliveredAndReported(t *testing.T) {
	// The shell waits for sleep: only a signal to the whole group ends
	// both quickly.
	r := start(t, context.Background(), "sh", "-c", "echo ready; sleep 60; echo never")
	testenv.Eventually(t, 30*time.Second, "the child to print ready", func() bool { return r.cap.Len() >= 1 })
	if err := r.c.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	recs := r.wait(t)
	last := recs[len(recs)-1]
	if last.Event != "exit" || last.Signal != "SIGTERM" || last.ExitCode == nil || *last.ExitCode != 128+15 {
		t.Errorf("exit record = %+v, want SIGTERM / 143", last)
	}
	if st := r.c.Status(); st.Signal != syscall.SIGTERM || st.ExitCode() != 143 {
		t.Errorf("status = %+v", st)
	}
	if err := r.c.Signal(syscall.SIGTERM); !errors.Is(err, ErrExited) {
		t.Errorf("Signal after exit = %v, want ErrExited", err)
	}
}

func TestCancelStopsTheChild(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := start(t, ctx, "sh", "-c", "trap 'echo got TERM; exit 7' TERM; echo ready; while :; do sleep 0.05; done")
	testenv.Eventually(t, 30*time.Second, "the child to print ready", func() bool { return r.cap.Len() >= 1 })
	cancel()
	recs := r.wait(t)
	s := byStream(recs)
	if n := len(s["stdout"]); n != 2 || s["stdout"][1].Message != "got TERM" {
		t.Errorf("stdout = %+v, want ready and got TERM", s["stdout"])
	}
	if st := r.c.Status(); st.ExitCode() != 7 {
		t.Errorf("status = %+v, want exit 7", st)
	}
}

func TestGrandchildHoldingThePipeDoesNotHoldRun(t *testing.T) {
	r := start(t, context.Background(), "sh", "-c", "(sleep 60; echo late) & echo now")
	recs := r.wait(t)                         // returns after DrainGrace, not after 60 s
	syscall.Kill(-r.c.PID(), syscall.SIGKILL) // the orphaned sleep, still in the group
	s := byStream(recs)
	if len(s["stdout"]) != 1 || s["stdout"][0].Message != "now" {
		t.Errorf("stdout = %+v", s["stdout"])
	}
	if last := recs[len(recs)-1]; last.Event != "exit" || *last.ExitCode != 0 {
		t.Errorf("last = %+v", last)
	}
}

func TestBadCommandAndNoURLOpen(t *testing.T) {
	if _, err := New(Command{Argv: []string{"/nonexistent/logagg-no-such-program"}}); err == nil {
		t.Error("a missing program was accepted")
	}
	// A child is given to the daemon explicitly; nothing opens one by URL.
	d := transport.Deps{Sink: sink.New(transporttest.NewCapture(), sink.Options{})}
	if _, err := transport.Open("exec:///bin/true", d); !errors.Is(err, transport.ErrUnknownScheme) {
		t.Errorf("exec URL: %v, want ErrUnknownScheme", err)
	}
}
