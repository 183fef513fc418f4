package file_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	_ "github.com/ipclab/logagg/internal/transport/file"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

// rec is one output line of a file record.
type rec struct {
	Raw     string
	Message string `json:"message"`
	Agg     struct {
		Transport  string   `json:"transport"`
		Listener   string   `json:"listener"`
		Stream     string   `json:"stream"`
		File       string   `json:"file"`
		SourceTime string   `json:"source_time"`
		Format     string   `json:"format"`
		Flags      []string `json:"flags"`
	} `json:"agg"`
}

func (r rec) has(flag string) bool {
	for _, f := range r.Agg.Flags {
		if f == flag {
			return true
		}
	}
	return false
}

// input is a running file:// listener writing into a capture.
type input struct {
	t      *testing.T
	cap    *transporttest.Capture
	m      *metrics.Metrics
	l      transport.Listener
	cancel context.CancelFunc
	done   chan error
}

// start opens raw with its checkpoint in state and runs it.
func start(t *testing.T, raw, state string) *input {
	t.Helper()
	return startWith(t, raw, state, func(*transport.Deps) {})
}

// startWith is start with the listener's deps changed by set first.
func startWith(t *testing.T, raw, state string, set func(*transport.Deps)) *input {
	t.Helper()
	in := &input{t: t, cap: transporttest.NewCapture(), m: metrics.New(nil), done: make(chan error, 1)}
	d := transport.Deps{Root: in.m, Sink: sink.New(in.cap, sink.Options{}),
		Opts: transport.DefaultOptions(), StateDir: state, Log: testLog()}
	set(&d)
	l, err := transport.Open(raw, d)
	if err != nil {
		t.Fatal(err)
	}
	in.l = l
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	go func() { in.done <- l.Run(ctx) }()
	t.Cleanup(func() { in.stop() })
	return in
}

func (in *input) stop() {
	if in.cancel == nil {
		return
	}
	in.cancel()
	in.cancel = nil
	select {
	case err := <-in.done:
		if err != nil {
			in.t.Errorf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		in.t.Fatal("Run did not return")
	}
	if errs := in.cap.Errors(); len(errs) > 0 {
		in.t.Errorf("capture: %v", errs)
	}
}

func (in *input) records() []rec {
	in.t.Helper()
	raw, err := in.cap.Records()
	if err != nil {
		in.t.Fatal(err)
	}
	out := make([]rec, len(raw))
	for i, r := range raw {
		out[i].Raw = string(r.Raw)
		if err := json.Unmarshal(r.Raw, &out[i]); err != nil {
			in.t.Fatalf("%v: %s", err, r.Raw)
		}
	}
	return out
}

// wait waits until n records were captured and returns them.
func (in *input) wait(n int) []rec {
	in.t.Helper()
	if _, ok := testenv.Until(20*time.Second, func() (int, bool) { return in.cap.Len(), in.cap.Len() >= n }); !ok {
		r := in.records()
		in.t.Fatalf("%d records, want %d: %s", len(r), n, describe(r))
	}
	return in.records()
}

func describe(r []rec) string {
	var b strings.Builder
	for i, x := range r {
		if i == 20 {
			fmt.Fprintf(&b, "… %d more", len(r)-i)
			break
		}
		b.WriteString(x.Raw)
		b.WriteByte('\n')
	}
	return b.String()
}

func appendFile(t testing.TB, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func lines(prefix string, from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "%s %06d\n", prefix, i)
	}
	return b.String()
}

func messages(r []rec) []string {
	out := make([]string, len(r))
	for i, x := range r {
		out[i] = x.Message
	}
	return out
}

func tempDirs(t *testing.T) (dir, state string) {
	d := t.TempDir()
	dir, state = filepath.Join(d, "logs"), filepath.Join(d, "state")
	os.Mkdir(dir, 0o755)
	os.Mkdir(state, 0o755)
	return dir, state
}

func readGauge(gv *prometheus.GaugeVec, url string) float64 {
	var d dto.Metric
	if err := gv.WithLabelValues(url).Write(&d); err != nil {
		return -1
	}
	return d.GetGauge().GetValue()
}

func counter(in *input, kind string) float64 {
	var d dto.Metric
	if err := in.m.DecodeErrors.WithLabelValues(in.l.URL(), kind).Write(&d); err != nil {
		return -1
	}
	return d.GetCounter().GetValue()
}

func mkfifo(p string) error { return syscall.Mkfifo(p, 0o644) }

// testLog shows the input's warnings with go test -v.
func testLog() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}
