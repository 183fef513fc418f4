package tracebench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ipclab/logagg/internal/bench/harness"
)

// aggProc is our aggregator, started so that its pid is known (the
// throughput package's Daemon interface hides it).
type aggProc struct {
	proc   *harness.Proc
	url    string // the bound listen URL (tcp/udp port filled in)
	output string
}

// startAggregator starts bin listening for transport in dir and returns
// once it is ready (it accepts input from then on).
func startAggregator(ctx context.Context, bin, transport, dir string, echo io.Writer) (*aggProc, error) {
	u, err := harness.ListenURL(transport, dir)
	if err != nil {
		return nil, err
	}
	output := filepath.Join(dir, "aggregated_logs.jsonl")
	// Same flags as throughput's runs: no fsync, no rotation, so that the
	// syscalls counted are the transport's and the batch writes', not fsync's.
	p, err := harness.Aggregator{Bin: bin, Stderr: echo, StopTimeout: 20 * time.Second,
		Args: []string{"--output", output, "--metrics", "127.0.0.1:0", "--fsync", "never", "--max-size", "0", "--listen", u}}.Start(ctx)
	if err != nil {
		return nil, err
	}
	return &aggProc{proc: p, url: p.Bound(u), output: output}, nil
}

func (a *aggProc) pid() int { return a.proc.Pid() }

func (a *aggProc) kill() { a.proc.Kill() }

// stop ends the aggregator with SIGTERM (a graceful drain), killing it
// after 20 s.
func (a *aggProc) stop() error {
	_, err := a.proc.Stop()
	return err
}

// gatedProc is a producer held at a gate: a shell waiting for one line on
// stdin before it execs the producer, keeping its pid.
type gatedProc struct {
	cmd    *exec.Cmd
	gate   io.WriteCloser
	stderr bytes.Buffer
	done   chan struct{}
	err    error
}

// gateScript reads one line, then replaces the shell with "$0" "$@" (the
// producer and its arguments). EOF instead of the line exits without
// running it.
const gateScript = `read x && exec "$0" "$@"`

func startGated(bin string, args []string) (*gatedProc, error) {
	g := &gatedProc{done: make(chan struct{})}
	g.cmd = exec.Command("/bin/sh", append([]string{"-c", gateScript, bin}, args...)...)
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	g.cmd.Stderr = &g.stderr
	var err error
	if g.gate, err = g.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := g.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start producer gate: %w", err)
	}
	go func() {
		g.err = g.cmd.Wait()
		close(g.done)
	}()
	return g, nil
}

func (g *gatedProc) pid() int { return g.cmd.Process.Pid }

// release opens the gate.
func (g *gatedProc) release() error {
	_, err := io.WriteString(g.gate, "go\n")
	g.gate.Close()
	return err
}

func (g *gatedProc) kill() {
	_ = g.cmd.Process.Kill()
	g.gate.Close()
	<-g.done
}

// producerSummary is the part of the producer's --json-summary line used here.
type producerSummary struct {
	Sent   int64  `json:"sent"`
	Failed int64  `json:"failed"`
	Writes int64  `json:"writes"`
	Error  string `json:"error"`
}

// summary waits for the producer to exit and returns its summary line.
func (g *gatedProc) summary() (producerSummary, error) {
	<-g.done
	var s producerSummary
	lines := bytes.Split(bytes.TrimSpace(g.stderr.Bytes()), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		l := bytes.TrimSpace(lines[i])
		if len(l) > 0 && l[0] == '{' && json.Unmarshal(l, &s) == nil {
			if g.err != nil {
				return s, fmt.Errorf("producer: %w: %s", g.err, s.Error)
			}
			return s, nil
		}
	}
	return s, fmt.Errorf("producer: no JSON summary (exit: %w): %s", g.err, strings.TrimSpace(g.stderr.String()))
}

// producerArgs are the producer's arguments for one run.
func producerArgs(transport, url string, size, count, rate int, id string) []string {
	return []string{transport, strconv.Itoa(size), "--addr", url, "--rate", strconv.Itoa(rate),
		"--count", strconv.Itoa(count), "--seq", "--id", id, "--json-summary"}
}

// waitWritten polls the number of lines in path until it reaches want, or
// it has not grown for quiet (datagram transports may lose records), or
// limit passes. It returns the last count.
func waitWritten(ctx context.Context, path string, want int64, quiet, limit time.Duration) int64 {
	var n, off int64
	last := time.Now()
	deadline := last.Add(limit)
	buf := make([]byte, 256<<10)
	for {
		if f, err := os.Open(path); err == nil {
			if _, err := f.Seek(off, io.SeekStart); err == nil {
				for {
					k, err := f.Read(buf)
					if k > 0 {
						n += int64(bytes.Count(buf[:k], []byte{'\n'}))
						off += int64(k)
						last = time.Now()
					}
					if err != nil {
						break
					}
				}
			}
			f.Close()
		}
		if n >= want || time.Since(last) >= quiet || time.Now().After(deadline) || ctx.Err() != nil {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}
