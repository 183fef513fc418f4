package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/otlp"
)

// The memory budget under hostile load: each test runs the aggregator with
// its default budget (limits.memory, 32 MiB) and a load that, unbounded,
// would take far more, and fails if the daemon's peak RSS (VmHWM) passes
// the budget by more than budgetMargin. What cannot fit must be refused,
// or written out early, and counted; never grown into.
const (
	defaultBudget = 32 << 20
	// budgetMargin is what the peak may exceed the budget by: the budget
	// keeps an allowance for resident code that the collector's stack
	// scans can overrun by a few MiB (docs/memory.md), and the soft limit
	// lets the heap pass it briefly.
	budgetMargin = 4 << 20
)

// checkPeak fails the test if the aggregator's VmHWM is above the budget
// and margin.
func checkPeak(t *testing.T, p *aggProc, what string) int64 {
	t.Helper()
	peak := procStatus(t, p.pid(), "VmHWM") << 10
	t.Logf("%s: peak RSS %.1f MiB (budget %d MiB, margin %d MiB); now RSS %.1f MiB", what,
		float64(peak)/(1<<20), defaultBudget>>20, budgetMargin>>20, float64(procStatus(t, p.pid(), "VmRSS")<<10)/(1<<20))
	if peak > defaultBudget+budgetMargin {
		t.Errorf("%s: peak RSS %.1f MiB, want at most %d MiB (the default budget and %d MiB margin)",
			what, float64(peak)/(1<<20), (defaultBudget+budgetMargin)>>20, budgetMargin>>20)
	}
	return peak
}

// TestMemoryBudgetPartialFrames: 2,048 connections each send 255 KiB
// without a newline (half a record each, half a GiB in all). Without a
// bound the daemon held all of it (1.2 GB of RSS before the event loops);
// within the budget the largest partial frames are written out, flagged
// truncated and counted, and every byte still reaches the file.
func TestMemoryBudgetPartialFrames(t *testing.T) {
	const conns, each = 2048, 255 << 10
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "s.sock")
	p := startAgg(t, dir, "--listen", "unix://"+sock, "--max-conns", "0")
	chunk := []byte(`{"message":"` + strings.Repeat("p", each-len(`{"message":"`)))
	var cs []net.Conn
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < conns; i += 8 {
				c, err := net.Dial("unix", sock)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := c.Write(chunk); err != nil {
					t.Error(err)
				}
				mu.Lock()
				cs = append(cs, c)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	p.waitMetric(conns*each, "logagg_bytes_in_total")
	checkPeak(t, p, fmt.Sprintf("%d partial frames of %d KiB", conns, each>>10))
	budget := p.metric("logagg_memory_budget_bytes", `kind="partial_frames"`)
	forced := p.metric("logagg_memory_limited_total", `kind="partial_frames"`)
	if truncated := p.metric("logagg_decode_errors_total", `kind="truncated"`); forced < float64(conns)-budget/each || truncated < forced {
		t.Errorf("%v partial frames written out early (%v flagged truncated), want at least %v", forced, truncated, float64(conns)-budget/each)
	}
	for _, c := range cs {
		c.Close()
	}
	cs = nil
	p.stop(syscall.SIGTERM)
	// Every byte sent is in the file: written out flagged truncated by the
	// budget, or flagged partial at the connection's close.
	total := 0
	for _, r := range readRecords(t, p.output) {
		m, _ := r["message"].(string)
		total += len(m)
	}
	if total != conns*each {
		t.Errorf("%d bytes of messages in the file, sent %d", total, conns*each)
	}
}

// TestMemoryBudgetHeldFileRecords: 1,000 container log files each end in
// 192 KiB of a long line the runtime cut into 16 KiB pieces (CRI's P
// lines) whose last piece has not come yet: unbounded, the file input
// held every one of them until partial_timeout. Within the budget for
// incomplete records (the one stream connections share) the largest are
// written out early, flagged truncated and counted; when the last pieces
// come, every byte is in the file once.
func TestMemoryBudgetHeldFileRecords(t *testing.T) {
	const files, pieces, size = 1000, 12, 16 << 10
	dir := testenv.ShortTempDir(t)
	logs := filepath.Join(dir, "logs")
	if err := os.Mkdir(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	const prefix = "2026-11-26T10:00:00.000000001Z stdout "
	piece := strings.Repeat("c", size)
	var b strings.Builder
	for range pieces {
		b.WriteString(prefix + "P " + piece + "\n")
	}
	for f := range files {
		if err := os.WriteFile(filepath.Join(logs, fmt.Sprintf("c%04d.log", f)), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := startAgg(t, dir, "--listen", "file://"+logs+"/*.log?from=start&format=cri&partial_timeout=1h")
	budget := p.metric("logagg_memory_budget_bytes", `kind="partial_frames"`)
	want := float64(files) - budget/(pieces*size)
	forced := p.waitMetric(want, "logagg_memory_limited_total", `kind="partial_frames"`)
	checkPeak(t, p, fmt.Sprintf("%d files holding %d KiB", files, pieces*size>>10))
	if forced < want {
		t.Fatalf("%v held records written out early, want at least %v", forced, want)
	}
	for f := range files {
		appendTo(t, filepath.Join(logs, fmt.Sprintf("c%04d.log", f)), prefix+"F end\n")
	}
	p.waitMetric(forced+files, "logagg_records_out_total")
	p.stop(syscall.SIGTERM)
	total, records := 0, 0
	for _, r := range readRecords(t, p.output) {
		m, _ := r["message"].(string)
		total += len(m)
		records++
	}
	if want := files * (pieces*size + len("end")); total != want || records != files+int(forced) {
		t.Errorf("%d records of %d bytes in the file, want %v of %d", records, total, files+int(forced), want)
	}
}

// TestMemoryBudgetManyFiles: a file input's glob matches 20,000 files.
// Following one costs about 1 KiB (10,000 more raised the peak by
// 8.4 MiB), taken of the connections' share as a connection's cost is:
// the files past it are not followed (counted), instead of taking the
// daemon past its budget (38.3 MiB with all 20,000 followed).
func TestMemoryBudgetManyFiles(t *testing.T) {
	const files = 20000
	dir := testenv.ShortTempDir(t)
	logs := filepath.Join(dir, "logs")
	if err := os.Mkdir(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	for f := range files {
		if err := os.WriteFile(filepath.Join(logs, fmt.Sprintf("f%05d.log", f)), fmt.Appendf(nil, "line of f%05d\n", f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := startAgg(t, dir, "--listen", "file://"+logs+"/*.log?from=start")
	share := p.metric("logagg_memory_budget_bytes", `kind="connections"`)
	followed := int(share) / 1024
	waited := p.waitMetric(files-float64(followed), "logagg_memory_limited_total", `kind="files"`)
	out := p.waitMetric(float64(followed), "logagg_records_out_total")
	checkPeak(t, p, fmt.Sprintf("%d files", files))
	t.Logf("%v records from the files followed, %v files turned away at the first scan", out, waited)
	if waited < files-float64(followed) || out != float64(followed) {
		t.Errorf("%v records and %v files turned away, want the %d files the share holds followed and the rest turned away", out, waited, followed)
	}
	p.stop(syscall.SIGTERM)
}

// TestMemoryBudgetDatagramFlood: eight senders flood a UDP and a unix
// datagram socket with 64 KiB datagrams. Each call reads only as many long
// datagrams as the budget's vector allows and gives their pages back; what
// the kernel drops on the UDP socket is counted, and every datagram sent is
// either a record or such a drop.
func TestMemoryBudgetDatagramFlood(t *testing.T) {
	const senders, each = 8, 300
	const size = 65000 // a UDP payload fits 65,507 bytes
	dir := testenv.ShortTempDir(t)
	dsock := filepath.Join(dir, "d.sock")
	p := startAgg(t, dir, "--listen", "udp://127.0.0.1:0", "--listen", "unixgram://"+dsock)
	udpAddr := strings.TrimPrefix(p.url("udp"), "udp://")
	payload := bytes.Repeat([]byte("d"), size)
	var sentUDP, sentUnix atomic.Int64
	var wg sync.WaitGroup
	for s := range senders {
		network, addr := "udp", udpAddr
		if s%2 == 1 {
			network, addr = "unixgram", dsock
		}
		wg.Go(func() {
			c, err := net.Dial(network, addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			for range each {
				if _, err := c.Write(payload); err != nil {
					if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOBUFS) {
						continue // not sent: the kernel said so to the sender
					}
					t.Error(err)
					return
				}
				if network == "udp" {
					sentUDP.Add(1)
				} else {
					sentUnix.Add(1)
				}
			}
		})
	}
	wg.Wait()
	sent := float64(sentUDP.Load() + sentUnix.Load())
	got, _ := testenv.Until(30*time.Second, func() (float64, bool) {
		v := p.metric("logagg_records_out_total") + p.metric("logagg_dropped_total", `cause="kernel_rxq_ovfl"`)
		return v, v >= sent
	})
	checkPeak(t, p, fmt.Sprintf("%v datagrams of %d B", sent, size))
	drops := p.metric("logagg_dropped_total", `cause="kernel_rxq_ovfl"`)
	t.Logf("sent %d UDP, %d unix datagrams; written %v, kernel drops %v", sentUDP.Load(), sentUnix.Load(), got-drops, drops)
	if got != sent {
		t.Errorf("records written and kernel drops add up to %v, sent %v", got, sent)
	}
	p.stop(syscall.SIGTERM)
}

// TestMemoryBudgetIdleConnections: 10,000 connections that send nothing.
// An idle connection costs about 1.2 KB; the budget's connections' share
// holds some 2,100 of them, and at that point the listener stops accepting
// (counted), so the rest wait in the listen backlog or are refused by the
// kernel when that is full, instead of costing memory. Closing accepted
// connections lets waiting ones in.
func TestMemoryBudgetIdleConnections(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "s.sock")
	p := startAgg(t, dir, "--listen", "unix://"+sock, "--max-conns", "0")
	idle := dialIdle(t, sock, 10000, nil)
	idle.holdBudget(t, p, transport.ConnCost)
	checkPeak(t, p, fmt.Sprintf("%d idle connections", len(idle.conns)))
	// The first connections were accepted first: records flow on them.
	for _, c := range idle.conns[:100] {
		fmt.Fprintln(c, `{"message":"from an idle connection"}`)
	}
	if got := p.waitMetric(100, "logagg_records_out_total"); got != 100 {
		t.Fatalf("records_out = %v, want 100", got)
	}
	idle.closeLetsIn(t, p, 500)
	p.stop(syscall.SIGTERM)
}

// TestMemoryBudgetIdleOTLPConnections: 3,000 connections to an OTLP gRPC
// receiver that say HTTP/2's client preface and nothing more, as a client
// between requests. gRPC holds far more per connection than a stream
// transport (its buffers, flow-control state and goroutines), and each is
// charged what it holds (otlp.GRPCConnCost), so the listener stops
// accepting well before the peak passes the budget; closing accepted ones
// lets waiting ones in.
func TestMemoryBudgetIdleOTLPConnections(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "otlp.sock")
	p := startAgg(t, dir, "--listen", "otlp+unix://"+sock, "--max-conns", "0")
	preface := append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0) // and an empty SETTINGS frame
	idle := dialIdle(t, sock, 3000, preface)
	idle.holdBudget(t, p, otlp.GRPCConnCost)
	checkPeak(t, p, fmt.Sprintf("%d idle gRPC connections", len(idle.conns)))
	idle.closeLetsIn(t, p, 100)
	p.stop(syscall.SIGTERM)
}

// idleConns are connections dialled to a unix socket that then say
// nothing more; the test's end closes those still open.
type idleConns struct {
	dials, refused int
	conns          []net.Conn // in the order they connected
}

// dialIdle dials n connections to sock, each sending greeting (if any).
// A dial the kernel refuses because the listen backlog is full (EAGAIN) is
// counted, not fatal.
func dialIdle(t *testing.T, sock string, n int, greeting []byte) *idleConns {
	t.Helper()
	idle := &idleConns{dials: n}
	t.Cleanup(func() {
		for _, c := range idle.conns {
			c.Close()
		}
	})
	for range n {
		c, err := net.Dial("unix", sock)
		if errors.Is(err, syscall.EAGAIN) {
			idle.refused++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		idle.conns = append(idle.conns, c)
		if len(greeting) > 0 {
			if _, err := c.Write(greeting); err != nil {
				t.Fatal(err)
			}
		}
	}
	return idle
}

// holdBudget checks that the daemon accepted as many connections as the
// connections' share holds at cost each, no more, and then stopped
// accepting (counted).
func (idle *idleConns) holdBudget(t *testing.T, p *aggProc, cost int64) {
	t.Helper()
	limit := float64(int64(p.metric("logagg_memory_budget_bytes", `kind="connections"`)) / cost)
	held := testenv.Poll(t, 20*time.Second, "the connections' budget spent", func() (float64, bool) {
		v := p.metric("logagg_connections")
		return v, v >= limit-1
	})
	waits := p.metric("logagg_memory_limited_total", `kind="connections"`)
	t.Logf("%d dialled: %d connected, %d refused by the kernel; the daemon holds %v (budget %v), stopped accepting %v times",
		idle.dials, len(idle.conns), idle.refused, held, limit, waits)
	if held > limit || waits < 1 {
		t.Errorf("the daemon holds %v connections (budget %v) and stopped accepting %v times", held, limit, waits)
	}
}

// closeLetsIn closes the first n connections (accepted ones) and waits for
// n waiting ones to be accepted in their place.
func (idle *idleConns) closeLetsIn(t *testing.T, p *aggProc, n int) {
	t.Helper()
	accepted := p.metric("logagg_connections_accepted_total")
	for _, c := range idle.conns[:n] {
		c.Close()
	}
	idle.conns = idle.conns[n:]
	testenv.Poll(t, 20*time.Second, "waiting connections accepted", func() (float64, bool) {
		v := p.metric("logagg_connections_accepted_total")
		return v, v >= accepted+float64(n)
	})
}

// appendTo appends s to the file at path, as a program writing its log does.
func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}
