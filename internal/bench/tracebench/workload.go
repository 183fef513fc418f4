package tracebench

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
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
