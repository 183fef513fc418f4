package harness

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Daemon is the log daemon under test: our aggregator (AggregatorDaemon),
// or a peer such as rsyslog, syslog-ng or the null reader (package
// peers). It is data: nothing happens until Start.
type Daemon interface {
	Name() string
	// Start launches the daemon in dir listening for transports and returns
	// once it accepts input.
	Start(ctx context.Context, dir string, transports []string, stderr io.Writer) (Running, error)
}

// Running is a started daemon.
type Running interface {
	// URL is where producers of transport send.
	URL(transport string) string
	// Output is the file the daemon writes (rotated segments Output.N are
	// scanned too), or "" when it writes none that can be read back; the
	// Running must then implement WrittenCounter.
	Output() string
	// KernelDrops returns datagram drops per transport where the daemon
	// exports them (nil otherwise). Called before Stop.
	KernelDrops() map[string]int64
	// Stop ends the daemon gracefully and returns its final state.
	Stop() (*os.ProcessState, error)
	// Config is the configuration used, saved with the results.
	Config() string
	// Pid is the daemon's process id.
	Pid() int
}

// WrittenCounter is a Running that counts the records it wrote per
// transport: our aggregator from its metrics, the null reader from its
// counts file. A Running whose Output is "" must be one.
type WrittenCounter interface {
	Written() map[string]int64
}

// AggregatorDaemon is our aggregator as a Daemon: one listener per
// transport in the run's directory (ListenURL), metrics on an ephemeral
// port, no fsync and no rotation.
type AggregatorDaemon struct {
	Bin       string
	ExtraArgs []string
	// Output is the output file (default DIR/aggregated_logs.jsonl).
	Output string
}

// Name implements Daemon.
func (a *AggregatorDaemon) Name() string { return "logagg" }

// aggregatorStopTimeout bounds the drain at the end of a run: a run flat
// out may leave the queue full.
const aggregatorStopTimeout = 60 * time.Second

// Start implements Daemon; the Running is a *RunningAggregator.
func (a *AggregatorDaemon) Start(ctx context.Context, dir string, transports []string, stderr io.Writer) (Running, error) {
	r := &RunningAggregator{output: a.Output, urls: map[string]string{}}
	if r.output == "" {
		r.output = filepath.Join(dir, "aggregated_logs.jsonl")
	}
	args := []string{"--output", r.output, "--metrics", "127.0.0.1:0", "--fsync", "never", "--max-size", "0"}
	asked := map[string]string{} // transport -> listen URL asked for
	for _, t := range transports {
		u, err := ListenURL(t, dir)
		if err != nil {
			return nil, err
		}
		args = append(args, "--listen", u)
		asked[t] = u
	}
	r.args = append(args, a.ExtraArgs...)
	p, err := Aggregator{Bin: a.Bin, Args: r.args, Stderr: stderr, StopTimeout: aggregatorStopTimeout}.Start(ctx)
	if err != nil {
		return nil, err
	}
	r.proc = p
	for t, u := range asked {
		r.urls[t] = p.Bound(u)
	}
	return r, nil
}

// RunningAggregator is a started AggregatorDaemon. Besides Running it
// counts what it wrote (WrittenCounter) and its open connections from its
// metrics. Its methods are safe for concurrent use.
type RunningAggregator struct {
	proc   *Proc
	output string
	args   []string
	urls   map[string]string // transport -> bound URL (the metrics label)
}

// URL implements Running: the listener's bound URL.
func (r *RunningAggregator) URL(t string) string { return r.urls[t] }

// Output is the file to scan, or "" when the aggregator writes to a
// non-regular file such as /dev/null: throughput.Measure then counts from
// Written.
func (r *RunningAggregator) Output() string {
	if fi, err := os.Stat(r.output); err == nil && !fi.Mode().IsRegular() {
		return ""
	}
	return r.output
}

// Pid implements Running.
func (r *RunningAggregator) Pid() int { return r.proc.Pid() }

// Config implements Running: the command line.
func (r *RunningAggregator) Config() string { return "aggregator " + strings.Join(r.args, " ") }

// Metrics is the URL of the aggregator's Prometheus metrics.
func (r *RunningAggregator) Metrics() string { return r.proc.Metrics() }

// KernelDrops implements Running: datagrams the kernel dropped per
// transport.
func (r *RunningAggregator) KernelDrops() map[string]int64 {
	return r.byTransport("logagg_dropped_total", map[string]string{"cause": "kernel_rxq_ovfl"})
}

// Written implements WrittenCounter: records written per transport.
func (r *RunningAggregator) Written() map[string]int64 {
	return r.byTransport("logagg_records_out_total", nil)
}

// Connections returns the open connections per stream transport, from the
// aggregator's logagg_connections gauge.
func (r *RunningAggregator) Connections() map[string]int64 {
	return r.byTransport("logagg_connections", nil)
}

// byTransport scrapes metric name (its samples whose labels include
// match) per transport; every transport is 0 when the scrape fails. A
// listener's metrics are labelled with its bound URL
// (tcp://127.0.0.1:PORT, not the tcp://127.0.0.1:0 it was asked for),
// which is what the aggregator reports in its readiness and URL returns.
func (r *RunningAggregator) byTransport(name string, match map[string]string) map[string]int64 {
	out := map[string]int64{}
	var byListener map[string]float64
	if u := r.proc.Metrics(); u != "" {
		if m, err := ScrapeMetrics(context.Background(), u); err == nil {
			byListener = m.ByLabel(name, "listener", match)
		}
	}
	for t, u := range r.urls {
		out[t] = int64(byListener[u])
	}
	return out
}

// Stop implements Running.
func (r *RunningAggregator) Stop() (*os.ProcessState, error) { return r.proc.Stop() }
