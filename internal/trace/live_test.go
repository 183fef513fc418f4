package trace

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipclab/logagg/bpftrace"
	"github.com/ipclab/logagg/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(workloadEnv) != "" {
		if err := runWorkload(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "workload:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// needLive skips (or, in CI, fails) when bpftrace cannot run here.
func needLive(t *testing.T) {
	t.Helper()
	var reason string
	if err := CheckPrivileges(); err != nil {
		reason = err.Error()
	} else if _, err := LookBpftrace(""); err != nil {
		reason = err.Error()
	} else if err := EnsureTracefs(); err != nil {
		reason = err.Error()
	}
	if reason == "" {
		return
	}
	testenv.SkipOrFail(t, "live bpftrace test: "+reason)
}

// proc is a workload child that prints "ready" and may wait for a stdin line.
type proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan error
}

func startWorkload(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), workloadEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stdin: stdin, done: make(chan error, 1)}
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
		_, _ = io.Copy(io.Discard, stdout)
		p.done <- cmd.Wait()
	}()
	select {
	case l := <-ready:
		if strings.TrimSpace(l) != "ready" {
			t.Fatalf("workload %v: got %q instead of ready", args, l)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("workload %v not ready", args)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) goAndWait(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- err // for Cleanup
		if err != nil {
			t.Fatalf("workload: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("workload did not finish")
	}
}

const (
	liveRecords = 1000
	liveSize    = 100
)

// TestScriptsLive runs every shipped script, in sequence (2 vCPUs), against
// a workload started for it, and checks what the maps must contain.
func TestScriptsLive(t *testing.T) {
	needLive(t)
	reasons, err := DropReasons()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		script string
		target string // "producer", "aggregator", "all" (pid 0), "udpflood", "tcp"
		check  func(*Output) error
	}{
		{"producer_syscalls", "producer", func(o *Output) error {
			if w := o.SyscallCounts()["write"]; w < liveRecords {
				return fmt.Errorf("write count %d < %d records", w, liveRecords)
			}
			return nil
		}},
		{"syscall_latency", "producer", func(o *Output) error {
			if n := HistCount(o.Hists["@lat_ns"]["write"]); n < liveRecords {
				return fmt.Errorf("write latencies %d < %d", n, liveRecords)
			}
			return nil
		}},
		{"aggregator_sched_latency", "aggregator", func(o *Output) error {
			if HistCount(o.Hists["@lat_ns"][""]) == 0 {
				return errors.New("no wakeup-to-run latencies")
			}
			return nil
		}},
		{"producer_context_switches", "aggregator", func(o *Output) error {
			if o.Maps["@switches"]["voluntary"] == 0 {
				return errors.New("no voluntary switches for a reader that blocks")
			}
			return nil
		}},
		{"write_bytes_per_sec", "producer", func(o *Output) error {
			if b, _ := o.Count("@bytes", "write"); b < liveRecords*liveSize {
				return fmt.Errorf("bytes written %d < %d", b, liveRecords*liveSize)
			}
			return nil
		}},
		{"recv_latency", "aggregator", func(o *Output) error {
			if HistCount(o.Hists["@lat_ns"]["read"]) == 0 || HistCount(o.Hists["@bytes"]["read"]) == 0 {
				return errors.New("no read latencies or sizes")
			}
			return nil
		}},
		{"batch_write_fsync", "aggregator", func(o *Output) error {
			if HistCount(o.Hists["@lat_ns"]["fsync"]) == 0 || HistCount(o.Hists["@write_bytes"]["write"]) == 0 {
				return errors.New("no fsync latencies or batch write sizes")
			}
			return nil
		}},
		{"skb_drops", "all", func(o *Output) error {
			for k, v := range o.Maps["@drops"] {
				if n, _ := strconv.Atoi(k); reasons[n] == "SOCKET_RCVBUFF" && v > 0 {
					return nil
				}
			}
			return fmt.Errorf("no SOCKET_RCVBUFF drops in %v", o.Maps["@drops"])
		}},
		{"sock_queue_overflow", "udpflood", func(o *Output) error {
			if o.Total("@udp_fail") == 0 {
				return fmt.Errorf("no UDP enqueue failures: %v", o.Maps)
			}
			return nil
		}},
		{"tcp_sender_cost", "tcp", func(o *Output) error {
			if w := o.Total("@writes"); w < liveRecords {
				return fmt.Errorf("writes counted %d < %d", w, liveRecords)
			}
			if o.Total("@segments") == 0 || o.Total("@appended")+o.Total("@new_skb") < liveRecords {
				return fmt.Errorf("segments %d, tcp_sendmsg %d for %d writes", o.Total("@segments"), o.Total("@appended")+o.Total("@new_skb"), liveRecords)
			}
			return nil
		}},
		{"tcp_alloc", "tcp", func(o *Output) error {
			if n := HistCount(o.Hists["@skb_len"][""]); n < liveRecords {
				return fmt.Errorf("tcp_sendmsg_locked seen %d times < %d writes", n, liveRecords)
			}
			return nil
		}},
	}
	if len(cases) != len(bpftrace.Names()) {
		t.Errorf("live cases cover %d scripts, %d are shipped: %v", len(cases), len(bpftrace.Names()), bpftrace.Names())
	}
	for _, tc := range cases {
		t.Run(tc.script, func(t *testing.T) {
			var work, udpFlood, agg *proc
			var pid int
			switch tc.target {
			case "producer", "aggregator", "all":
				dir, err := os.MkdirTemp("", "lg")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(dir) })
				sock := filepath.Join(dir, "s")
				agg = startWorkload(t, "aggregator", sock, filepath.Join(dir, "out.jsonl"))
				work = startWorkload(t, "producer", sock, strconv.Itoa(liveRecords), strconv.Itoa(liveSize), "20us")
				pid = map[string]int{"producer": work.pid(), "aggregator": agg.pid(), "all": 0}[tc.target]
				if tc.target == "all" {
					// skb_drops needs drops: flood an unread UDP socket too.
					udpFlood = startWorkload(t, "udpflood", strconv.Itoa(liveRecords))
				}
				defer func() {
					select {
					case err := <-agg.done:
						agg.done <- err
					case <-time.After(30 * time.Second):
						t.Error("aggregator workload did not finish")
					}
				}()
			case "udpflood":
				work = startWorkload(t, "udpflood", strconv.Itoa(liveRecords))
				pid = work.pid()
			case "tcp":
				work = startWorkload(t, "tcp", strconv.Itoa(liveRecords), strconv.Itoa(liveSize))
				pid = work.pid()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			s, err := Start(ctx, tc.script, Target{PID: pid}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: attached in %v", tc.script, s.AttachTime)
			work.goAndWait(t)
			if udpFlood != nil {
				udpFlood.goAndWait(t)
			}
			if tc.target == "aggregator" {
				// The aggregator drains and fsyncs what it read, then exits
				// (the producer closed the connection).
				select {
				case err := <-agg.done:
					agg.done <- err
				case <-time.After(30 * time.Second):
					t.Fatal("aggregator workload did not finish")
				}
			}
			out, err := s.Stop()
			if err != nil {
				t.Fatalf("stop: %v", err)
			}
			if out.AttachedProbes == 0 || len(out.Maps)+len(out.Hists) == 0 {
				t.Fatalf("empty output: %+v", out)
			}
			if err := tc.check(out); err != nil {
				t.Errorf("%s: %v", tc.script, err)
			}
		})
	}
}

// TestMissingProbeType proves a script needing kprobes fails before
// bpftrace runs, naming what the kernel lacks, when kprobes are absent.
func TestMissingProbeType(t *testing.T) {
	needLive(t)
	script := filepath.Join("testdata", "needs_kprobe.bt")
	_, err := Start(context.Background(), script, Target{}, Options{})
	if exists("/sys/bus/event_source/devices/kprobe") {
		// A kernel with kprobes attaches it; nothing to prove here.
		if err != nil {
			t.Fatalf("kprobes present but start failed: %v", err)
		}
		t.Skip("this kernel has kprobes")
	}
	var pe *ProbeError
	if !errors.As(err, &pe) || !errors.Is(err, ErrProbeUnavailable) {
		t.Fatalf("err = %v, want a *ProbeError", err)
	}
	if pe.Probe != "kprobe:tcp_sendmsg" || !strings.Contains(err.Error(), "CONFIG_KPROBES") {
		t.Fatalf("unclear error: %v", err)
	}
}

// TestMissingTracepoint checks that an unknown tracepoint is named too.
func TestMissingTracepoint(t *testing.T) {
	needLive(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "x.bt")
	if err := os.WriteFile(p, []byte("tracepoint:nosuch:event { @ = count(); }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Start(context.Background(), p, Target{}, Options{})
	var pe *ProbeError
	if !errors.As(err, &pe) || pe.Probe != "tracepoint:nosuch:event" {
		t.Fatalf("err = %v, want *ProbeError for tracepoint:nosuch:event", err)
	}
}

// TestRunStopsAtContextEnd checks Run's contract: the end of ctx stops
// bpftrace with SIGINT and the END-printed maps come back.
func TestRunStopsAtContextEnd(t *testing.T) {
	needLive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	out, err := Run(ctx, "producer_context_switches", Target{PID: 0}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if out.Total("@switches") == 0 {
		t.Fatalf("no context switches on the whole machine in a second: %+v", out.Maps)
	}
}

// With OutputFile, bpftrace writes to the file and not to us; the session
// still waits for attachment and decodes printf lines and maps at Stop.
func TestOutputFile(t *testing.T) {
	needLive(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "w.bt")
	src := "tracepoint:syscalls:sys_exit_write /pid == $1/ { printf(\"w %d\\n\", args->ret); @n = count(); }\n"
	if err := os.WriteFile(script, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.json")
	s, err := Start(context.Background(), script, Target{PID: os.Getpid()}, Options{OutputFile: out})
	if err != nil {
		t.Fatal(err)
	}
	// A second of writes: bpftrace 0.17 may start counting a moment
	// after its perf_event fds exist.
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	for range 20 {
		null.WriteString("a write to be traced\n")
		time.Sleep(50 * time.Millisecond) // the workload: writes spread over a second
	}
	o, err := s.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Printf) < 5 || o.Total("@n") < 5 || int64(len(o.Printf)) > o.Total("@n") {
		b, _ := os.ReadFile(out)
		t.Fatalf("%d printf lines, @n %d; want 5 to 20 each\n%s", len(o.Printf), o.Total("@n"), b)
	}
	if fi, err := os.Stat(out); err != nil || fi.Size() == 0 {
		t.Fatalf("output file: %v", err)
	}
}
