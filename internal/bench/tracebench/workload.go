package tracebench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ipclab/logagg/internal/bench/throughput"
)

// aggProc is our aggregator, started so that its pid is known (the
// throughput package's Daemon interface hides it).
type aggProc struct {
	cmd    *exec.Cmd
	url    string // the bound listen URL (tcp/udp port filled in)
	output string
	done   chan struct{} // closed when the process has exited
	err    error         // Wait's result, valid after done
	mu     sync.Mutex
	log    bytes.Buffer
}

var listenRe = regexp.MustCompile(`listening on (\S+)`)

// startAggregator starts bin listening for transport in dir and returns
// once it prints "aggregator: writing" (it accepts input from then on).
func startAggregator(ctx context.Context, bin, transport, dir string, echo io.Writer) (*aggProc, error) {
	u, err := throughput.ListenURL(transport, dir)
	if err != nil {
		return nil, err
	}
	a := &aggProc{output: filepath.Join(dir, "aggregated_logs.jsonl"), done: make(chan struct{})}
	// Same flags as throughput's runs: no fsync, no rotation, so that the
	// syscalls counted are the transport's and the batch writes', not fsync's.
	a.cmd = exec.Command(bin, "--output", a.output, "--metrics", "127.0.0.1:0", "--fsync", "never", "--max-size", "0", "--listen", u)
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	a.cmd.Stderr = pw
	if err := a.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start aggregator: %w", err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			a.mu.Lock()
			a.log.WriteString(line + "\n")
			if m := listenRe.FindStringSubmatch(line); m != nil && a.url == "" {
				a.url = m[1]
			}
			a.mu.Unlock()
			if echo != nil {
				fmt.Fprintln(echo, line)
			}
			if !signalled && strings.Contains(line, "aggregator: writing") {
				signalled = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		a.err = a.cmd.Wait()
		pw.Close()
		close(a.done)
	}()
	t := time.NewTimer(15 * time.Second)
	defer t.Stop()
	select {
	case <-ready:
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.url == "" {
			a.kill()
			return nil, fmt.Errorf("aggregator did not say where it listens:\n%s", a.log.String())
		}
		return a, nil
	case <-a.done:
		return nil, fmt.Errorf("aggregator exited at start-up: %w\n%s", a.err, a.logText())
	case <-t.C:
		err = errors.New("aggregator did not start within 15s")
	case <-ctx.Done():
		err = ctx.Err()
	}
	a.kill()
	return nil, err
}

func (a *aggProc) pid() int { return a.cmd.Process.Pid }

func (a *aggProc) logText() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.log.String()
}

func (a *aggProc) kill() {
	_ = a.cmd.Process.Kill()
	<-a.done
}

// stop ends the aggregator with SIGTERM (a graceful drain), killing it
// after 20 s.
func (a *aggProc) stop() error {
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(20 * time.Second)
	defer t.Stop()
	select {
	case <-a.done:
	case <-t.C:
		a.kill()
		return errors.New("aggregator did not exit within 20s of SIGTERM")
	}
	if a.err != nil {
		return fmt.Errorf("aggregator: %w\n%s", a.err, a.logText())
	}
	return nil
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
