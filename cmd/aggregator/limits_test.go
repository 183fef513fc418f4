package main

// Limits: what the aggregator does when it runs out of file descriptors,
// and whether what it loses at shutdown reaches a scrape.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/bench/harness"
	"github.com/ipclab/logagg/internal/seqstamp"
	"github.com/ipclab/logagg/internal/testenv"
)

// startAggLimited is startAgg with the aggregator's RLIMIT_NOFILE set to
// nofile (soft and hard) by prlimit(1), which then executes it.
func startAggLimited(t *testing.T, dir string, nofile int, args ...string) *aggProc {
	t.Helper()
	prlimit := testenv.RequireCommand(t, "prlimit")
	p := &aggProc{t: t, output: filepath.Join(dir, "out.jsonl")}
	full := append([]string{fmt.Sprintf("--nofile=%d:%d", nofile, nofile), testenv.Binary(t, "aggregator"),
		"--output", p.output, "--metrics", "127.0.0.1:0", "--fsync", "never"}, args...)
	proc, err := harness.Aggregator{Bin: prlimit, Args: full, Stderr: &p.stderr, StartTimeout: 20 * time.Second}.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.proc, p.metrics = proc, proc.Metrics()
	t.Cleanup(proc.Kill)
	return p
}

// TestFDLimitClientWaitsNotDropped: at its file descriptor limit the
// aggregator accepts no connection it cannot serve. With 128 descriptors
// and 120 idle connections held, a producer used to be accepted and
// closed at once (its socket could not be duplicated): it exited 0,
// reporting 1,000 records delivered, and none was written; some of the
// idle connections were accepted and closed the same way. Now the
// listener stops accepting while descriptors are short (a reserve is kept
// for the rest of the daemon): the producer and the idle connections
// beyond the limit wait in the backlog, none is closed, and once the idle
// ones go every record of the producer is written, once.
func TestFDLimitClientWaitsNotDropped(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "s.sock")
	p := startAggLimited(t, dir, 128, "--listen", "unix://"+sock, "--max-conns", "0")
	var idle []net.Conn
	for range 120 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	t.Cleanup(func() {
		for _, c := range idle {
			c.Close()
		}
	})
	// The aggregator took what it could: the count of its connections
	// stays put.
	var held float64
	testenv.Poll(t, 20*time.Second, "the connections the aggregator holds to settle", func() (float64, bool) {
		before := p.metric("logagg_connections")
		time.Sleep(300 * time.Millisecond)
		held = p.metric("logagg_connections")
		return held, held > 0 && held == before
	})

	prod := exec.Command(testenv.Binary(t, "producer"), "unixsock", "100", "--addr", "unix://"+sock,
		"--count", "1000", "--rate", "0", "--seq", "--id", "fdlimit")
	var prodOut syncBuffer
	prod.Stdout, prod.Stderr = &prodOut, &prodOut
	if err := prod.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- prod.Wait() }()
	t.Cleanup(func() { prod.Process.Kill() })

	// While descriptors are short: nothing accepted, nothing written, and
	// every idle connection still open (a read times out; one the
	// aggregator accepted and closed reads EOF).
	time.Sleep(time.Second)
	if got := p.metric("logagg_records_out_total"); got != 0 {
		t.Fatalf("%v records written while the aggregator had no descriptor to spare", got)
	}
	if got := p.metric("logagg_connections"); got != held {
		t.Errorf("connections went from %v to %v while descriptors were short", held, got)
	}
	closed := 0
	for _, c := range idle {
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		var b [1]byte
		if _, err := c.Read(b[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
			closed++
		}
	}
	if closed > 0 {
		t.Errorf("%d of %d idle connections were closed by the aggregator", closed, len(idle))
	}
	for _, c := range idle {
		c.Close()
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("producer: %v\n%s", err, prodOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the producer did not finish once descriptors were free\n%s", prodOut.String())
	}
	if got := p.waitMetric(1000, "logagg_records_out_total"); got != 1000 {
		t.Fatalf("records_out %v, want 1000; the producer said: %s", got, prodOut.String())
	}
	if v := p.metric("logagg_accept_paused_seconds_total", `cause="fds"`); v <= 0 {
		t.Errorf("accept_paused_seconds_total{cause=\"fds\"} = %v", v)
	}
	if !strings.Contains(p.log(), "not accepting new connections: file descriptors are short") {
		t.Errorf("the pause is not logged:\n%s", p.log())
	}
	p.stop(syscall.SIGTERM)
	seen := map[uint64]int{}
	for _, line := range bytes.Split(mustRead(t, p.output), []byte("\n")) {
		if st, ok := seqstamp.Find(line); ok && st.Producer == "fdlimit" {
			seen[st.Seq]++
		}
	}
	for seq := uint64(1); seq <= 1000; seq++ {
		if seen[seq] != 1 {
			t.Fatalf("record %d written %d times (%d distinct of 1000; the producer said: %s)", seq, seen[seq], len(seen), prodOut.String())
		}
	}
}

// TestShutdownLossesReachAScrape: records the aggregator loses at
// shutdown (the disk still full at the drain deadline: write_error) are
// counted only when the writer gives up, at the hard stop; the metrics
// endpoint used to close right after, so no scrape ever showed them. Now
// an aggregator that lost records keeps the endpoint until the next
// scrape (its scraper here polls every 200 ms) and exits after it: the
// last scrape holds exactly what the exit reports.
func TestShutdownLossesReachAScrape(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "needs root to mount a small tmpfs")
	}
	dir := testenv.ShortTempDir(t)
	disk := filepath.Join(dir, "disk")
	if err := os.Mkdir(disk, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", disk).CombinedOutput(); err != nil {
		testenv.SkipOrFail(t, fmt.Sprintf("cannot mount a tmpfs: %v %s", err, out))
	}
	t.Cleanup(func() { exec.Command("umount", "-l", disk).Run() })
	sock := filepath.Join(dir, "s.sock")
	p := &aggProc{t: t, output: filepath.Join(disk, "out.jsonl")}
	proc, err := harness.Aggregator{Bin: testenv.Binary(t, "aggregator"), Stderr: &p.stderr, StartTimeout: 20 * time.Second,
		Args: []string{"--output", p.output, "--listen", "unix://" + sock, "--metrics", "127.0.0.1:0",
			"--drain-timeout", "1s", "--queue-batches", "16"}}.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.proc, p.metrics = proc, proc.Metrics()
	t.Cleanup(proc.Kill)

	// The scraper: every 200 ms, until the endpoint is gone.
	var (
		mu   sync.Mutex
		last map[string]float64 // dropped_total by cause, in the latest scrape
	)
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		client := &http.Client{Timeout: 5 * time.Second}
		for {
			d, err := scrapeDropped(client, p.metrics)
			if err != nil {
				return // the aggregator exited
			}
			mu.Lock()
			last = d
			mu.Unlock()
			time.Sleep(200 * time.Millisecond)
		}
	}()

	for i := range 3 {
		prod := exec.Command(testenv.Binary(t, "producer"), "unixsock", "300", "--addr", "unix://"+sock,
			"--rate", "0", "--duration", "60s", "--seq", "--id", "full-"+strconv.Itoa(i), "--reconnect=false")
		if err := prod.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { prod.Process.Kill(); prod.Wait() })
	}
	testenv.Poll(t, 30*time.Second, "the write to fail", func() (string, bool) {
		return p.log(), strings.Contains(p.log(), "write output failed")
	})
	p.signal(syscall.SIGTERM)
	select {
	case <-p.exited():
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit after SIGTERM:\n%s", p.log())
	}
	<-scraped
	log := p.log()
	m := regexp.MustCompile(`accepted but not written: (.*)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no loss reported at exit:\n%s", log)
	}
	reported := map[string]float64{}
	for _, c := range regexp.MustCompile(`(\w+) (\d+) records`).FindAllStringSubmatch(m[1], -1) {
		n, _ := strconv.ParseFloat(c[2], 64)
		reported[c[1]] = n
	}
	if reported["write_error"] == 0 {
		t.Fatalf("no write_error loss reported (%v):\n%s", reported, log)
	}
	mu.Lock()
	defer mu.Unlock()
	for cause, n := range reported {
		if last[cause] != n {
			t.Errorf("dropped_total{cause=%q}: the last scrape said %v, the exit %v", cause, last[cause], n)
		}
	}
	t.Logf("lost %v, scraped %v", reported, last)
}

// scrapeDropped reads logagg_dropped_total by cause, summed over listeners.
func scrapeDropped(c *http.Client, url string) (map[string]float64, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	re := regexp.MustCompile(`^logagg_dropped_total\{.*cause="(\w+)".*\} (\S+)$`)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			out[m[1]] += v
		}
	}
	return out, sc.Err()
}
