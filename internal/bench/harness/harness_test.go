package harness

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
)

// fakeEnv makes the test binary a fake aggregator (TestMain): it sends
// its readiness split over two datagrams, the way a long list of
// listeners arrives, and on SIGTERM writes a line to stderr and exits
// with the status in fakeExitEnv.
const (
	fakeEnv     = "HARNESS_TEST_FAKE_AGGREGATOR"
	fakeExitEnv = "HARNESS_TEST_FAKE_EXIT"
)

func TestMain(m *testing.M) {
	if os.Getenv(fakeEnv) != "" {
		os.Exit(fakeAggregator())
	}
	os.Exit(m.Run())
}

func fakeAggregator() int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	c, err := net.Dial("unixgram", os.Getenv("NOTIFY_SOCKET"))
	if err != nil {
		return 3
	}
	for _, msg := range []string{
		listenVar + "tcp://127.0.0.1:4001",
		listenVar + "udp://127.0.0.1:4002\n" + metricsVar + "http://127.0.0.1:4003/metrics\n" + readyState + "\nSTATUS=serving",
	} {
		if _, err := c.Write([]byte(msg)); err != nil {
			return 3
		}
	}
	<-term
	os.Stderr.WriteString("fake: 3 records accepted but not written\n")
	if os.Getenv(fakeExitEnv) == "1" {
		return 1
	}
	return 0
}

func TestStartReportsBoundAddresses(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	p, err := Aggregator{
		Bin: testenv.Binary(t, "aggregator"),
		Args: []string{"--output", filepath.Join(dir, "out.jsonl"), "--fsync", "never", "--metrics", "127.0.0.1:0",
			"--listen", "tcp://127.0.0.1:0", "--listen", "unix://" + filepath.Join(dir, "log.sock")},
	}.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	notifyDir := filepath.Dir(strings.TrimPrefix(p.cmd.Env[len(p.cmd.Env)-1], "NOTIFY_SOCKET="))

	tcp := p.Bound("tcp://127.0.0.1:0")
	if !strings.HasPrefix(tcp, "tcp://127.0.0.1:") || strings.HasSuffix(tcp, ":0") {
		t.Fatalf("Bound(tcp://127.0.0.1:0) = %q, want the port bound (Listen: %q)", tcp, p.Listen())
	}
	if got, want := p.Bound("unix://"+filepath.Join(dir, "log.sock")), "unix://"+filepath.Join(dir, "log.sock"); got != want {
		t.Errorf("Bound(unix) = %q, want %q", got, want)
	}
	if n := len(p.Listen()); n != 2 {
		t.Errorf("Listen() = %q, want 2 URLs", p.Listen())
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(tcp, "tcp://"))
	if err != nil {
		t.Fatalf("dial the reported %s: %v", tcp, err)
	}
	conn.Close()
	resp, err := http.Get(p.Metrics())
	if err != nil {
		t.Fatalf("GET the reported metrics %q: %v", p.Metrics(), err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "logagg_") {
		t.Errorf("GET %s: %s, %d bytes without logagg_ metrics", p.Metrics(), resp.Status, len(body))
	}

	st, err := p.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if !st.Success() {
		t.Errorf("exit %v after SIGTERM, want 0", st)
	}
	if _, err := os.Stat(notifyDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("notify directory %s left behind after exit (%v)", notifyDir, err)
	}
}

// TestStartFailsPromptlyAtStartupExit: a bad flag ends the aggregator at
// once, and Start says so with its stderr instead of waiting for the
// start timeout.
func TestStartFailsPromptlyAtStartupExit(t *testing.T) {
	bin := testenv.Binary(t, "aggregator")
	t0 := time.Now()
	_, err := Aggregator{Bin: bin, Args: []string{"--no-such-flag"}, StartTimeout: time.Minute}.Start(context.Background())
	if !errors.Is(err, ErrNotReady) {
		t.Fatalf("Start = %v, want ErrNotReady", err)
	}
	if !strings.Contains(err.Error(), "flag provided but not defined: -no-such-flag") || !strings.Contains(err.Error(), "exit status 2") {
		t.Errorf("error lacks the aggregator's stderr or exit status: %v", err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("Start took %v to see the exit", d)
	}
}

// TestStartTimesOutWithoutReady: a process that never notifies is killed
// at StartTimeout, and the error quotes what it wrote.
func TestStartTimesOutWithoutReady(t *testing.T) {
	t0 := time.Now()
	_, err := Aggregator{Bin: "/bin/sh", Args: []string{"-c", "echo starting slowly >&2; exec sleep 60"},
		StartTimeout: 300 * time.Millisecond}.Start(context.Background())
	if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "no READY=1 within 300ms") {
		t.Fatalf("Start = %v, want ErrNotReady after 300ms", err)
	}
	if !strings.Contains(err.Error(), "starting slowly") {
		t.Errorf("error lacks the stderr tail: %v", err)
	}
	// Start returns once the killed process was reaped: not after sleep 60.
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("Start returned after %v", d)
	}
}

func TestStartEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := Aggregator{Bin: "/bin/sh", Args: []string{"-c", "exec sleep 60"}, StartTimeout: time.Minute}.Start(ctx)
	if !errors.Is(err, ErrNotReady) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start = %v, want ErrNotReady and the context's error", err)
	}
}

// TestReadinessOverSeveralDatagrams: addresses sent in datagrams before
// the one with READY=1 count, and a non-zero exit at Stop is an error
// with the stderr tail.
func TestReadinessOverSeveralDatagrams(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Aggregator{Bin: exe, Env: []string{fakeEnv + "=1", fakeExitEnv + "=1"}}.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if got := strings.Join(p.Listen(), " "); got != "tcp://127.0.0.1:4001 udp://127.0.0.1:4002" {
		t.Errorf("Listen() = %q", got)
	}
	if got := p.Bound("udp://127.0.0.1:0"); got != "udp://127.0.0.1:4002" {
		t.Errorf("Bound(udp) = %q", got)
	}
	if got := p.Metrics(); got != "http://127.0.0.1:4003/metrics" {
		t.Errorf("Metrics() = %q", got)
	}
	st, err := p.Stop()
	if err == nil || !strings.Contains(err.Error(), "3 records accepted but not written") {
		t.Errorf("Stop = %v, want an error quoting the stderr tail", err)
	}
	if st == nil || st.ExitCode() != 1 {
		t.Errorf("exit state %v, want status 1", st)
	}
	select {
	case <-p.Done():
	default:
		t.Error("Done not closed after Stop")
	}
}

func TestBoundAmbiguousOrMissing(t *testing.T) {
	p := &Proc{listen: []string{"tcp://127.0.0.1:1", "tcp://127.0.0.1:2"}}
	if got := p.Bound("tcp://127.0.0.1:0"); got != "" {
		t.Errorf("two tcp listeners: Bound = %q, want \"\"", got)
	}
	if got := p.Bound("tcp://127.0.0.1:2"); got != "tcp://127.0.0.1:2" {
		t.Errorf("exact: Bound = %q", got)
	}
	if got := p.Bound("udp://127.0.0.1:0"); got != "" {
		t.Errorf("no udp listener: Bound = %q, want \"\"", got)
	}
}

func TestTailKeepsTheEndFromALineStart(t *testing.T) {
	w := &tailWriter{}
	for i := 0; i < 2*tailKeep/10; i++ {
		w.Write([]byte("123456789\n"))
	}
	w.Write([]byte("last line\n"))
	got := w.tail()
	if !strings.HasSuffix(got, "last line") || !strings.HasPrefix(got, "123456789\n") || len(got) > tailKeep {
		t.Errorf("tail: %d bytes, starts %q, ends %q", len(got), got[:min(20, len(got))], got[max(0, len(got)-20):])
	}
}
