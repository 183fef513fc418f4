package harness

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
)

func TestProducerArgs(t *testing.T) {
	p := Producer{Bin: "p", Transport: "tcp", URL: "tcp://127.0.0.1:1", Size: 100, ID: "tcp-0"}
	got := p.Args()
	// The rate is always passed: the producer's own default is 10/s.
	for _, want := range [][]string{{"tcp", "100"}, {"--addr", "tcp://127.0.0.1:1"}, {"--id", "tcp-0"}, {"--rate", "0"}} {
		if i := slices.Index(got, want[0]); i < 0 || !slices.Equal(got[i:i+len(want)], want) {
			t.Errorf("args %q lack %q", got, want)
		}
	}
	for _, absent := range []string{"--count", "--duration", "--buffer", "--format", "--ack"} {
		if slices.Contains(got, absent) {
			t.Errorf("args %q carry %s though it was not asked for", got, absent)
		}
	}
	p.Ack = true
	if !slices.Contains(p.Args(), "--ack") {
		t.Error("tcp with Ack: no --ack")
	}
	p.Transport = "udp"
	if slices.Contains(p.Args(), "--ack") {
		t.Error("udp has no acknowledgements, but --ack was passed")
	}
}

// listenLines accepts unix stream connections on a socket in dir and
// counts the lines that carry id.
func listenLines(t *testing.T, dir, id string) (url string, lines *atomic.Int64) {
	t.Helper()
	path := filepath.Join(dir, "in.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	lines = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if strings.Contains(sc.Text(), id) {
						lines.Add(1)
					}
				}
			}()
		}
	}()
	return "unix://" + path, lines
}

// A gated producer keeps its pid through the gate and sends nothing
// until Release; then it sends Count records and reports them.
func TestGatedProducerRunsAtReleaseUnderItsPid(t *testing.T) {
	bin := testenv.Binary(t, "producer")
	dir := testenv.ShortTempDir(t)
	url, lines := listenLines(t, dir, "gated-0")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := Producer{Bin: bin, Transport: "unixsock", URL: url, Size: 100, ID: "gated-0", Count: 500, Gated: true}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	cmdline := func() string {
		b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.Pid()), "cmdline"))
		return string(b)
	}
	// Start returns once the exec began (its close-on-exec pipe closed),
	// which is before the kernel sets the new image's arguments: until
	// then cmdline reads empty.
	testenv.Eventually(t, 10*time.Second, "the gate's cmdline", func() bool { return cmdline() != "" })
	if c := cmdline(); !strings.HasPrefix(c, "/bin/sh\x00") {
		t.Fatalf("before Release pid %d runs %q, want the gate's shell", p.Pid(), c)
	}
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	sum, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if sum.Sent != 500 || sum.Error != "" {
		t.Fatalf("summary %+v, want 500 sent and no error", sum)
	}
	testenv.Eventually(t, 10*time.Second, "500 lines at the listener", func() bool { return lines.Load() == 500 })
	if p.CPU() <= 0 {
		t.Errorf("CPU %v after Wait, want > 0", p.CPU())
	}
}

// A producer that cannot deliver says so in its summary, with true
// counts; a process that writes no summary is an error quoting it.
func TestProducerWaitSummaryOrError(t *testing.T) {
	bin := testenv.Binary(t, "producer")
	dir := testenv.ShortTempDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := Producer{Bin: bin, Transport: "unixsock", URL: "unix://" + filepath.Join(dir, "nobody.sock"), Size: 100, ID: "lost-0", Count: 10}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := p.Wait()
	if err != nil {
		t.Fatalf("a summary was written, yet Wait failed: %v", err)
	}
	if sum.Error == "" || sum.Sent != 0 {
		t.Fatalf("summary %+v, want an error and 0 sent", sum)
	}

	p, err = Producer{Bin: "/bin/echo", Transport: "unixsock", URL: "unix:///x", Size: 100, ID: "echo-0"}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); err == nil || !strings.Contains(err.Error(), "no JSON summary") {
		t.Fatalf("Wait on a process without a summary: %v, want a no-summary error", err)
	}
}
