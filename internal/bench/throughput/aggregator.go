package throughput

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
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

var (
	listenRe  = regexp.MustCompile(`listening on (\S+)`)
	metricsRe = regexp.MustCompile(`metrics on (http://\S+)`)
)

// ListenURL is the aggregator URL used for a transport in dir. TCP and UDP
// use port 0; the bound port is read back from the aggregator's stderr.
func ListenURL(transport, dir string) (string, error) {
	switch transport {
	case "unixsock", "unix":
		return "unix://" + filepath.Join(dir, "log.sock"), nil
	case "unixgram":
		return "unixgram://" + filepath.Join(dir, "log.dgram.sock"), nil
	case "tcp":
		return "tcp://127.0.0.1:0", nil
	case "udp":
		return "udp://127.0.0.1:0", nil
	case "fifo":
		return "fifo://" + filepath.Join(dir, "log_fifo"), nil
	case "shm":
		return "shm://" + filepath.Join(dir, "log.shm.sock"), nil
	case "mq":
		return "mq:///logagg-" + strconv.Itoa(os.Getpid()) + "-" + filepath.Base(dir), nil
	}
	return "", fmt.Errorf("unknown transport %q", transport)
}

func schemeOf(u string) string {
	if i := strings.Index(u, "://"); i > 0 {
		return u[:i]
	}
	return u
}

type aggRunning struct {
	cmd     *exec.Cmd
	output  string
	args    []string
	mu      sync.Mutex
	log     bytes.Buffer
	urls    map[string]string // transport -> bound URL (the metrics label)
	metrics string
	waitErr chan error
}

// Start implements Daemon.
func (a *Aggregator) Start(ctx context.Context, dir string, transports []string, stderr io.Writer) (Running, error) {
	r := &aggRunning{
		output:  a.Output,
		urls:    map[string]string{},
		waitErr: make(chan error, 1),
	}
	if r.output == "" {
		r.output = filepath.Join(dir, "aggregated_logs.jsonl")
	}
	args := []string{"--output", r.output, "--metrics", "127.0.0.1:0", "--fsync", "never", "--max-size", "0"}
	byScheme := map[string]string{}
	for _, t := range transports {
		u, err := ListenURL(t, dir)
		if err != nil {
			return nil, err
		}
		args = append(args, "--listen", u)
		byScheme[schemeOf(u)] = t
	}
	r.args = append(args, a.ExtraArgs...)
	r.cmd = exec.CommandContext(ctx, a.Bin, r.args...)
	r.cmd.Cancel = func() error { return r.cmd.Process.Signal(syscall.SIGTERM) }
	r.cmd.WaitDelay = 30 * time.Second
	pr, pw := io.Pipe()
	r.cmd.Stderr = pw
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start aggregator: %w", err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			r.mu.Lock()
			r.log.WriteString(line + "\n")
			if m := listenRe.FindStringSubmatch(line); m != nil {
				r.urls[byScheme[schemeOf(m[1])]] = m[1]
			}
			if m := metricsRe.FindStringSubmatch(line); m != nil {
				r.metrics = m[1]
			}
			r.mu.Unlock()
			if strings.Contains(line, "aggregator: writing") {
				once.Do(func() { close(ready) })
			}
			if stderr != nil {
				fmt.Fprintln(stderr, line)
			}
		}
	}()
	go func() { r.waitErr <- r.cmd.Wait(); pw.Close() }()
	select {
	case <-ready:
		return r, nil
	case err := <-r.waitErr:
		return nil, fmt.Errorf("aggregator exited at start-up: %w\n%s", err, r.logText())
	case <-time.After(15 * time.Second):
		r.cmd.Process.Kill()
		return nil, errors.New("aggregator did not start within 15s")
	}
}

func (r *aggRunning) logText() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.log.String()
}

func (r *aggRunning) URL(t string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.urls[t]
}

// Output is the file to scan, or "" when the aggregator writes to a
// non-regular file such as /dev/null: Run then counts from Written.
func (r *aggRunning) Output() string {
	if fi, err := os.Stat(r.output); err == nil && !fi.Mode().IsRegular() {
		return ""
	}
	return r.output
}

func (r *aggRunning) Pid() int { return r.cmd.Process.Pid }

func (r *aggRunning) Config() string { return "aggregator " + strings.Join(r.args, " ") }

func (r *aggRunning) KernelDrops() map[string]int64 { return r.byTransport(kernelDropsRe) }

// Written implements writtenCounter: records written per transport.
func (r *aggRunning) Written() map[string]int64 { return r.byTransport(recordsWrittenRe) }

// Connections returns the open connections per stream transport, from the
// aggregator's logagg_connections gauge.
func (r *aggRunning) Connections() map[string]int64 { return r.byTransport(connectionsRe) }

// byTransport scrapes the metric re matches per transport. A listener's
// metrics are labelled with its bound URL (tcp://127.0.0.1:PORT, not the
// tcp://127.0.0.1:0 it was asked for), which is what the aggregator logs
// as "listening on" and URL returns.
func (r *aggRunning) byTransport(re *regexp.Regexp) map[string]int64 {
	r.mu.Lock()
	mu := r.metrics
	bound := maps.Clone(r.urls)
	r.mu.Unlock()
	out := map[string]int64{}
	if mu == "" {
		return out
	}
	byLabel := scrapeByListener(mu, re)
	for t, u := range bound {
		out[t] = byLabel[u]
	}
	return out
}

func (r *aggRunning) Stop() (*os.ProcessState, error) {
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-r.waitErr:
		if err != nil {
			return r.cmd.ProcessState, fmt.Errorf("aggregator: %w\n%s", err, r.logText())
		}
	case <-time.After(60 * time.Second):
		r.cmd.Process.Kill()
		return nil, errors.New("aggregator did not exit within 60s of SIGTERM")
	}
	return r.cmd.ProcessState, nil
}
