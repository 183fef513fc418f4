package fifo_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	_ "github.com/ipclab/logagg/internal/transport/fifo"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

// TestWritersComeAndGo: the seed's EOF problem. After the first writer
// closes, the listener keeps reading later writers.
func TestWritersComeAndGo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.fifo")
	raw := "fifo://" + path
	m := metrics.New(nil)
	cap := transporttest.NewCapture()
	o := transport.DefaultOptions()
	o.RcvBuf = 256 << 10
	l, err := transport.Open(raw, transport.Deps{Root: m, Sink: sink.New(cap, sink.Options{}), Opts: o})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != os.ModeNamedPipe || fi.Mode().Perm() != o.SocketMode {
		t.Fatalf("fifo not created with mode %v: %v %v", o.SocketMode, fi, err)
	}
	var d dto.Metric
	m.RcvBuf.WithLabelValues(raw).Write(&d)
	if got := d.GetGauge().GetValue(); got != 256<<10 {
		t.Errorf("pipe size %v, want %d", got, 256<<10)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	for i := range 3 {
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("writer line\n"))
		w.Close()
		testenv.Eventually(t, 20*time.Second, fmt.Sprintf("writer %d's line", i), func() bool { return cap.Len() >= i+1 })
	}
	// A partial line left in the pipe at shutdown is kept, flagged.
	w, _ := os.OpenFile(path, os.O_WRONLY, 0)
	w.Write([]byte("unterminated"))
	w.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	recs, err := cap.Records()
	if err != nil || len(recs) != 4 {
		t.Fatalf("got %d records (%v), want 4", len(recs), err)
	}
	if recs[3].Message != "unterminated" || !recs[3].HasFlag("partial") {
		t.Errorf("last record %s", recs[3].Raw)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("fifo left after Run: %v", err)
	}
}

// TestHalfLineNotGlued: a writer that leaves half a line and goes away
// does not get the next writer's record glued onto it: the half line is
// written flagged partial (and counted), the next record arrives clean.
func TestHalfLineNotGlued(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.fifo")
	m := metrics.New(nil)
	cap := transporttest.NewCapture()
	l, err := transport.Open("fifo://"+path, transport.Deps{Root: m, Sink: sink.New(cap, sink.Options{}), Opts: transport.DefaultOptions()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	write := func(s string) {
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(s))
		w.Close()
	}
	probe, err := os.OpenFile(path, os.O_WRONLY, 0) // to ask how much the pipe holds
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	write(`{"message":"half a li`) // writer A dies mid-line
	testenv.Eventually(t, 20*time.Second, "the listener to read the half line", func() bool {
		n, err := unix.IoctlGetInt(int(probe.Fd()), unix.TIOCINQ) // FIONREAD
		return err == nil && n == 0
	})
	// The listener holds it; it goes stale after 250 ms with nothing
	// following. That time passing is what the test is about.
	time.Sleep(400 * time.Millisecond)
	write("{\"message\":\"writer B\"}\n")
	testenv.Poll(t, 20*time.Second, "2 records", func() (int, bool) { return cap.Len(), cap.Len() >= 2 })
	recs, err := cap.Records()
	if err != nil {
		t.Fatal(err)
	}
	if recs[0].Message != `{"message":"half a li` || !recs[0].HasFlag("partial") {
		t.Errorf("half line: %s", recs[0].Raw)
	}
	if recs[1].Message != "writer B" || len(recs[1].Agg.Flags) != 0 {
		t.Errorf("next writer's record: %s", recs[1].Raw)
	}
	var d dto.Metric
	m.DecodeErrors.WithLabelValues(l.URL(), metrics.KindPartial).Write(&d)
	if got := d.GetCounter().GetValue(); got != 1 {
		t.Errorf("decode_errors_total{partial} = %v, want 1", got)
	}
}
