package throughput

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/ipclab/logagg/internal/bench/harness"
)

// Aggregator is our aggregator as a Daemon.
type Aggregator struct {
	Bin       string
	ExtraArgs []string
	// Output is the output file (default DIR/aggregated_logs.jsonl).
	Output string
}

// Name implements Daemon.
func (a *Aggregator) Name() string { return "logagg" }

type aggRunning struct {
	proc   *harness.Proc
	output string
	args   []string
	urls   map[string]string // transport -> bound URL (the metrics label)
}

// Start implements Daemon.
func (a *Aggregator) Start(ctx context.Context, dir string, transports []string, stderr io.Writer) (Running, error) {
	r := &aggRunning{output: a.Output, urls: map[string]string{}}
	if r.output == "" {
		r.output = filepath.Join(dir, "aggregated_logs.jsonl")
	}
	args := []string{"--output", r.output, "--metrics", "127.0.0.1:0", "--fsync", "never", "--max-size", "0"}
	asked := map[string]string{} // transport -> listen URL asked for
	for _, t := range transports {
		u, err := harness.ListenURL(t, dir)
		if err != nil {
			return nil, err
		}
		args = append(args, "--listen", u)
		asked[t] = u
	}
	r.args = append(args, a.ExtraArgs...)
	p, err := harness.Aggregator{Bin: a.Bin, Args: r.args, Stderr: stderr, StopTimeout: stopTimeout}.Start(ctx)
	if err != nil {
		return nil, err
	}
	r.proc = p
	for t, u := range asked {
		r.urls[t] = p.Bound(u)
	}
	return r, nil
}

// stopTimeout bounds the drain at the end of a run: a run flat out may
// leave the queue full.
const stopTimeout = 60 * time.Second

func (r *aggRunning) URL(t string) string { return r.urls[t] }

// Output is the file to scan, or "" when the aggregator writes to a
// non-regular file such as /dev/null: Run then counts from Written.
func (r *aggRunning) Output() string {
	if fi, err := os.Stat(r.output); err == nil && !fi.Mode().IsRegular() {
		return ""
	}
	return r.output
}

func (r *aggRunning) Pid() int { return r.proc.Pid() }

func (r *aggRunning) Config() string { return "aggregator " + strings.Join(r.args, " ") }

func (r *aggRunning) KernelDrops() map[string]int64 { return r.byTransport(kernelDropsRe) }

// Written implements writtenCounter: records written per transport.
func (r *aggRunning) Written() map[string]int64 { return r.byTransport(recordsWrittenRe) }

// Connections returns the open connections per stream transport, from the
// aggregator's logagg_connections gauge.
func (r *aggRunning) Connections() map[string]int64 { return r.byTransport(connectionsRe) }

// byTransport scrapes the metric re matches per transport. A listener's
// metrics are labelled with its bound URL (tcp://127.0.0.1:PORT, not the
// tcp://127.0.0.1:0 it was asked for), which is what the aggregator
// reports in its readiness and URL returns.
func (r *aggRunning) byTransport(re *regexp.Regexp) map[string]int64 {
	out := map[string]int64{}
	if r.proc.Metrics() == "" {
		return out
	}
	byLabel := scrapeByListener(r.proc.Metrics(), re)
	for t, u := range r.urls {
		out[t] = byLabel[u]
	}
	return out
}

func (r *aggRunning) Stop() (*os.ProcessState, error) { return r.proc.Stop() }
