package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
)

// procStatus reads one numeric field (Threads, VmRSS, VmHWM in kB) of a
// process's /proc status.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			v, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return v
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// threadBound is the bound on the daemon's threads: a small
// multiple of GOMAXPROCS (the aggregator runs with this machine's CPUs).
func threadBound() int64 { return int64(4*runtime.NumCPU() + 16) }

// TestManyIdleConnectionsFewThreads holds thousands of idle unix and TCP
// connections open with --max-conns 0 (unlimited) and a memory budget that
// holds them, and checks the daemon's
// threads stay bounded, records still flow, and the threads and fds come
// back down when the connections close. Before the event loops every idle
// unix connection held an OS thread and 10,300 of them aborted the daemon.
func TestManyIdleConnectionsFewThreads(t *testing.T) {
	const perTransport = 4000
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "s.sock")
	// A budget whose connections' share holds them all (docs/memory.md).
	p := startAgg(t, dir, "--listen", "unix://"+sock, "--listen", "tcp://127.0.0.1:0", "--max-conns", "0", "--memory", "128MiB")
	tcpAddr := strings.TrimPrefix(p.url("tcp"), "tcp://")
	pid := p.pid()
	baseThreads := procStatus(t, pid, "Threads")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < 2*perTransport; i++ {
		network, addr := "unix", sock
		if i%2 == 1 {
			network, addr = "tcp", tcpAddr
		}
		c, err := net.Dial(network, addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	if got := p.waitMetric(2*perTransport, "logagg_connections"); got != 2*perTransport {
		t.Fatalf("aggregator holds %v connections, want %d", got, 2*perTransport)
	}
	threads := procStatus(t, pid, "Threads")
	t.Logf("%d idle connections: %d threads (baseline %d, bound %d), RSS %d kB", 2*perTransport, threads, baseThreads, threadBound(), procStatus(t, pid, "VmRSS"))
	if threads > threadBound() {
		t.Errorf("%d threads with %d idle connections, want <= %d", threads, 2*perTransport, threadBound())
	}
	// Records still flow on some of them.
	for _, c := range conns[:100] {
		fmt.Fprintln(c, `{"message":"from an idle connection"}`)
	}
	if got := p.waitMetric(100, "logagg_records_out_total"); got != 100 {
		t.Fatalf("records_out = %v, want 100", got)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	testenv.Poll(t, 20*time.Second, fmt.Sprintf("no connections and at most %d threads", max(baseThreads, threads)), func() (string, bool) {
		conns, th := p.metric("logagg_connections"), procStatus(t, pid, "Threads")
		return fmt.Sprintf("%v connections, %d threads", conns, th), conns == 0 && th <= max(baseThreads, threads)
	})
	p.stop(syscall.SIGTERM)
}

// TestConnectionChurnLosesNothing: 10,000 connect/write/close cycles from
// four client goroutines against --max-conns 100. Connections beyond the
// limit wait in the backlog instead of being accepted and dropped, so every
// record whose write succeeded arrives, exactly once, and the counters say
// records_in = records_out + dropped.
func TestConnectionChurnLosesNothing(t *testing.T) {
	const workers, cycles = 4, 2500
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "s.sock")
	p := startAgg(t, dir, "--listen", "unix://"+sock, "--max-conns", "100")
	var wg sync.WaitGroup
	var mu sync.Mutex
	sent, failed := map[string]bool{}, 0
	for w := range workers {
		wg.Go(func() {
			for i := range cycles {
				id := fmt.Sprintf("w%d-%d", w, i)
				c, err := net.Dial("unix", sock)
				if err == nil {
					_, err = fmt.Fprintf(c, "{\"message\":%q}\n", id)
					c.Close()
				}
				mu.Lock()
				if err == nil {
					sent[id] = true
				} else {
					failed++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	want := float64(len(sent))
	got := p.waitMetric(want, "logagg_records_out_total")
	in, dropped := p.metric("logagg_records_in_total"), p.metric("logagg_dropped_total")
	p.stop(syscall.SIGTERM)
	t.Logf("%d cycles: %d writes succeeded, %d client errors; records in %v, out %v, dropped %v", workers*cycles, len(sent), failed, in, got, dropped)
	if got != want || in != got+dropped || dropped != 0 {
		t.Fatalf("records_out %v, records_in %v, dropped %v; %d writes succeeded", got, in, dropped, len(sent))
	}
	seen := map[string]int{}
	for _, r := range readRecords(t, p.output) {
		if m, ok := r["message"].(string); ok {
			seen[m]++
		}
	}
	for id := range sent {
		if seen[id] != 1 {
			t.Fatalf("record %s arrived %d times", id, seen[id])
		}
	}
}

// TestProducerWaitsForSlot: while idle connections hold every slot, a
// producer that connects is not told "sent" for records that are thrown
// away: it waits, and once slots free up all its records arrive.
func TestProducerWaitsForSlot(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "s.sock")
	p := startAgg(t, dir, "--listen", "unix://"+sock, "--max-conns", "50")
	var idle []net.Conn
	for range 50 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	p.waitMetric(50, "logagg_connections")
	prod := exec.Command(testenv.Binary(t, "producer"), "unixsock", "100", "--addr", "unix://"+sock,
		"--count", "1000", "--rate", "0", "--seq", "--id", "waiter")
	out, err := prod.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	prod.Stderr = prod.Stdout
	if err := prod.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { b, _ := readAllString(out); err := prod.Wait(); t.Logf("producer: %s", b); exited <- err }()
	select {
	case err := <-exited:
		t.Fatalf("producer finished while every slot was taken (%v) and %v records were written", err, p.metric("logagg_records_out_total"))
	case <-time.After(time.Second):
	}
	if got := p.metric("logagg_records_out_total"); got != 0 {
		t.Fatalf("%v records written while every slot was taken", got)
	}
	for _, c := range idle {
		c.Close()
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("producer: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("producer did not finish after the slots were freed")
	}
	if got := p.waitMetric(1000, "logagg_records_out_total"); got != 1000 {
		t.Fatalf("records_out = %v, want 1000", got)
	}
	p.stop(syscall.SIGTERM)
}

func readAllString(r interface{ Read([]byte) (int, error) }) (string, error) {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String(), nil
		}
	}
}
