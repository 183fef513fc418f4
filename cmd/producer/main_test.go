package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
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

	"github.com/ipclab/logagg/internal/mqueue"
	"github.com/ipclab/logagg/internal/seqstamp"
	"github.com/ipclab/logagg/internal/testenv"
	"golang.org/x/sys/unix"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "producer-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "producer")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// collector gathers the lines a listener receives.
type collector struct {
	mu    sync.Mutex
	lines []string
}

func (c *collector) add(l string) { c.mu.Lock(); c.lines = append(c.lines, l); c.mu.Unlock() }
func (c *collector) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.lines...)
}

func (c *collector) wait(t *testing.T, n int) []string {
	t.Helper()
	testenv.Poll(t, 10*time.Second, fmt.Sprintf("%d lines", n), func() (string, bool) {
		got := len(c.get())
		return fmt.Sprintf("%d lines", got), got >= n
	})
	return c.get()
}

func listenUnix(t *testing.T) (string, *collector) {
	dir, err := os.MkdirTemp("", "lg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := filepath.Join(dir, "p.sock")
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	c := &collector{}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				sc := bufio.NewScanner(conn)
				for sc.Scan() {
					c.add(sc.Text())
				}
			}()
		}
	}()
	return "unix://" + p, c
}

func listenUDP(t *testing.T) (string, *collector) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Large enough that a fast burst of small datagrams is not dropped.
	pc.(*net.UDPConn).SetReadBuffer(4 << 20)
	t.Cleanup(func() { pc.Close() })
	c := &collector{}
	go func() {
		buf := make([]byte, 70000)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			for _, l := range strings.Split(strings.TrimSuffix(string(buf[:n]), "\n"), "\n") {
				c.add(l)
			}
		}
	}()
	return "udp://" + pc.LocalAddr().String(), c
}

var summaryRE = regexp.MustCompile(`(?m)^producer: sent=(\d+) failed=(\d+) elapsed=[0-9.]+s rate=\d+/s bytes=(\d+) reconnects=(\d+)$`)

// runSummary checks that a producer run ended without error (err, its exit)
// and returns its summary line's fields and the records it sent.
func runSummary(t *testing.T, err error, stderr string) (m []string, sent int) {
	t.Helper()
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	if m = summaryRE.FindStringSubmatch(stderr); m == nil {
		t.Fatalf("summary: %q", stderr)
	}
	sent, _ = strconv.Atoi(m[1])
	return m, sent
}

func TestDeliversEverySeqOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		listen func(*testing.T) (string, *collector)
		extra  []string
	}{
		{"unix", listenUnix, nil},
		{"unix-buffered", listenUnix, []string{"--buffer", "4096"}},
		{"udp", listenUDP, []string{"--rate", "2000"}},
		{"udp-packed", listenUDP, []string{"--buffer", "1500"}},
		{"unix-ticked", listenUnix, []string{"--rate", "20000", "--tick", "1ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, c := tc.listen(t)
			const n = 300
			args := append([]string{"--addr", addr, "--count", strconv.Itoa(n), "--rate", "0", "--seq", "--id", "pt-1"}, tc.extra...)
			args = append(args, "ignored-transport-name", "300")
			var stderr bytes.Buffer
			cmd := exec.Command(bin, args...)
			cmd.Stderr = &stderr
			m, sent := runSummary(t, cmd.Run(), stderr.String())
			if sent != n || m[2] != "0" || strings.Count(stderr.String(), "\n") != 1 {
				t.Fatalf("summary: %q", stderr.String())
			}
			lines := c.wait(t, n)
			seen := map[uint64]int{}
			total := 0
			for _, l := range lines {
				st, ok := seqstamp.Find([]byte(l))
				if !ok || st.Producer != "pt-1" {
					t.Fatalf("line without stamp: %q", l)
				}
				seen[st.Seq]++
				total += len(l) + 1
			}
			for i := uint64(1); i <= n; i++ {
				if seen[i] != 1 {
					t.Fatalf("seq %d arrived %d times", i, seen[i])
				}
			}
			if strconv.Itoa(total) != m[3] {
				t.Errorf("summary bytes=%s, received %d", m[3], total)
			}
			// Records are padded to about the requested size.
			if avg := total / n; avg < 290 || avg > 310 {
				t.Errorf("average record %d bytes, want about 300: %s", avg, lines[0])
			}
		})
	}
}

func TestNoListener(t *testing.T) {
	dir, err := os.MkdirTemp("", "lg")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	addr := "unix://" + filepath.Join(dir, "missing.sock")
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "--addr", addr, "--count", "5", "unixsock", "100")
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v (%s)", err, stderr.String())
	}
	want := "producer: could not deliver to " + addr + ": dial unix"
	if !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "no such file or directory") {
		t.Fatalf("stderr %q lacks %q", stderr.String(), want)
	}
	if !summaryRE.MatchString(stderr.String()) {
		t.Errorf("no summary line: %q", stderr.String())
	}
}

func TestBadUsage(t *testing.T) {
	for _, args := range [][]string{{"carrier-pigeon", "100"}, {"unixsock", "zero"}, {"unixsock", "0"}, {"--format", "xml", "unixsock", "100"}} {
		var stderr bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.HasPrefix(stderr.String(), "producer: ") {
			t.Errorf("%q: %v %q", args, err, stderr.String())
		}
	}
}

// TestSIGTERM: the producer stops, flushes, prints its summary and exits 0,
// and every record it counted as sent arrived.
func TestSIGTERM(t *testing.T) {
	addr, c := listenUnix(t)
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "--addr", addr, "--duration", "1m", "--rate", "200", "--buffer", "8192", "--seq", "unixsock", "100")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The 8 KiB buffer fills after ~80 records; wait for the first chunk.
	c.wait(t, 20)
	cmd.Process.Signal(syscall.SIGTERM)
	m, sent := runSummary(t, cmd.Wait(), stderr.String())
	lines := c.wait(t, sent)
	if len(lines) != sent || m[2] != "0" {
		t.Fatalf("summary %q, received %d", m[0], len(lines))
	}
}

// A send blocked because nobody reads (here a POSIX queue without a reader,
// full after msg_max messages) does not make the producer hang on SIGTERM:
// it ends within the grace, exits 1, and counts what the kernel took.
func TestSIGTERMWhileBlockedInASend(t *testing.T) {
	name := fmt.Sprintf("/logagg-blocked-%d", os.Getpid())
	q, err := mqueue.Open(name, unix.O_CREAT|unix.O_RDONLY, 0o600, nil)
	if err != nil {
		testenv.SkipOrFail(t, fmt.Sprintf("POSIX mqueue unavailable: %v", err))
	}
	defer mqueue.Unlink(name)
	defer q.Close()
	attr, err := q.Attr()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "mq", "100", "--addr", "mq://"+name, "--rate", "0", "--duration", "1m")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the queue is full: the producer is then blocked in mq_send.
	testenv.Poll(t, 10*time.Second, "the queue to fill", func() (string, bool) {
		a, err := q.Attr()
		return fmt.Sprintf("%v %+v", err, a), err == nil && a.CurMsgs == attr.MaxMsg
	})
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("exit: %v, want status 1\n%s", err, stderr.String())
		}
	case <-time.After(blockedSendGrace + 5*time.Second):
		cmd.Process.Kill()
		t.Fatalf("producer still blocked %v after SIGTERM\n%s", blockedSendGrace+5*time.Second, stderr.String())
	}
	m := summaryRE.FindStringSubmatch(stderr.String())
	if m == nil || !strings.Contains(stderr.String(), "nobody is reading") {
		t.Fatalf("no summary or reason:\n%s", stderr.String())
	}
	if sent, _ := strconv.Atoi(m[1]); int64(sent) != attr.MaxMsg {
		t.Fatalf("sent=%d, want the queue's capacity %d", sent, attr.MaxMsg)
	}
}

// A socket that belongs to another user is refused before anything is
// sent, naming the owner, and the exit status says so; --aggregator-user
// trusts that user.
func TestRefusesAnotherUsersSocket(t *testing.T) {
	testenv.RequireRoot(t)
	addr, c := listenUnix(t)
	if err := os.Lchown(strings.TrimPrefix(addr, "unix://"), testenv.Nobody, testenv.Nobody); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "unixsock", "100", "--addr", addr, "--count", "5", "--rate", "0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not the aggregator's") || !strings.Contains(string(out), "nobody") {
		t.Errorf("producer to nobody's socket: %v\n%s", err, out)
	}
	if got := c.get(); len(got) != 0 {
		t.Fatalf("%d records reached nobody's socket", len(got))
	}
	out, err = exec.Command(bin, "unixsock", "100", "--addr", addr, "--count", "5", "--rate", "0", "--aggregator-user", "nobody").CombinedOutput()
	if err != nil {
		t.Fatalf("producer trusting nobody: %v\n%s", err, out)
	}
	c.wait(t, 5)
}

func TestAggregatorUserUnknown(t *testing.T) {
	out, err := exec.Command(bin, "unixsock", "100", "--aggregator-user", "no-such-user-here").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "no-such-user-here") {
		t.Errorf("unknown --aggregator-user: %v\n%s", err, out)
	}
}

// With --tick the rate is kept by the tick: never ahead of the schedule by
// more than a tick's records, and not far behind it on an idle machine.
func TestTickKeepsTheRate(t *testing.T) {
	addr, _ := listenUnix(t)
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "--addr", addr, "--rate", "20000", "--tick", "1ms", "--duration", "500ms", "unixsock", "100")
	cmd.Stderr = &stderr
	_, sent := runSummary(t, cmd.Run(), stderr.String())
	// 500 ms at 20,000/s is 10,000; one tick is 20 records.
	if sent > 10000+20 || sent < 5000 {
		t.Fatalf("sent %d in 500ms at 20000/s with a 1ms tick, want about 10000", sent)
	}
}
