package daemon

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/config"
	"github.com/ipclab/logagg/internal/testenv"
	_ "github.com/ipclab/logagg/internal/transport/all"
)

// An in-process daemon: records sent before the stop are all written, the
// health endpoint answers, and a second
// daemon can bind the same address after the first returned.
func TestDaemonServesDrainsAndRebinds(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "s.sock")
	cfg := config.Default()
	cfg.Listen = []string{"unix://" + sock}
	cfg.Output.Path = filepath.Join(dir, "out.jsonl")
	cfg.Metrics = "127.0.0.1:0"
	for round := 0; round < 2; round++ {
		hard, hardCancel := context.WithCancel(context.Background())
		d, err := New(cfg, nil, hard)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		stop, stopNow := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Run(stop, hard) }()
		resp, err := http.Get("http://" + d.MetricsAddr() + "/healthz")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("healthz: %v %v", resp, err)
		}
		resp.Body.Close()
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 1000; i++ {
			fmt.Fprintf(c, "{\"round\":%d,\"n\":%d}\n", round, i)
		}
		c.Close()
		stopNow()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Run did not return after stop")
		}
		hardCancel()
	}
	f, err := os.Open(cfg.Output.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), `"agg":{`) {
			t.Fatalf("line without enrichment: %s", sc.Text())
		}
		lines++
	}
	if lines != 2000 {
		t.Fatalf("%d lines written, want 2000 (1000 per round)", lines)
	}
}

func TestNewReportsBadListenerBeforeRunning(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	cfg := config.Default()
	cfg.Output.Path = filepath.Join(dir, "out.jsonl")
	cfg.Listen = []string{"unix://" + filepath.Join(dir, "ok.sock"), "tcp://256.0.0.1:1"}
	if _, err := New(cfg, nil, context.Background()); err == nil || !strings.Contains(err.Error(), "tcp://256.0.0.1:1") {
		t.Fatalf("New = %v, want an error naming the bad listener", err)
	}
	// The good listener bound before the failure was released again.
	if _, err := os.Stat(filepath.Join(dir, "ok.sock")); err == nil {
		t.Fatal("socket of the first listener left behind after New failed")
	}
}

// The metrics endpoint is safe by default: an empty host binds the
// loopback (as listeners do), and the profiler (goroutine dumps, CPU
// profiles) is served only with --pprof.
func TestMetricsLoopbackAndPprofOptIn(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	for _, pprofOn := range []bool{false, true} {
		cfg := config.Default()
		cfg.Listen = []string{"unix://" + filepath.Join(dir, "s.sock")}
		cfg.Output.Path = filepath.Join(dir, "out.jsonl")
		cfg.Metrics = ":0"
		cfg.Pprof = pprofOn
		hard, hardCancel := context.WithCancel(context.Background())
		d, err := New(cfg, nil, hard)
		if err != nil {
			t.Fatal(err)
		}
		stop, stopNow := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Run(stop, hard) }()
		host, port, _ := net.SplitHostPort(d.MetricsAddr())
		if host != "127.0.0.1" {
			t.Errorf("--metrics :0 bound %s, want the loopback 127.0.0.1", d.MetricsAddr())
		}
		for path, want := range map[string]int{"/metrics": 200, "/healthz": 200, "/debug/pprof/": 404, "/debug/pprof/goroutine?debug=1": 404} {
			if pprofOn && strings.HasPrefix(path, "/debug/pprof/") {
				want = 200
			}
			resp, err := http.Get("http://127.0.0.1:" + port + path)
			if err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("pprof=%v: GET %s = %d, want %d", pprofOn, path, resp.StatusCode, want)
			}
		}
		stopNow()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		hardCancel()
	}
	// --pprof needs the metrics endpoint it is served on.
	cfg := config.Default()
	cfg.Listen = []string{"unix://" + filepath.Join(dir, "s.sock")}
	cfg.Pprof = true
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "pprof") {
		t.Errorf("--pprof without --metrics: %v, want an error naming pprof", err)
	}
}
