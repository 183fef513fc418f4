package fifo_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/ipclab/logagg/internal/metrics"
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
	l, err := transport.Open(raw, m, transport.Deps{Out: cap, Opts: o})
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
		deadline := time.Now().Add(20 * time.Second)
		for cap.Len() < i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("writer %d's line never arrived", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
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
