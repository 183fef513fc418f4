package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults of Aggregator's timeouts.
const (
	DefaultStartTimeout = 15 * time.Second
	DefaultStopTimeout  = 30 * time.Second
)

// The readiness variables the aggregator sends before READY=1
// (cmd/aggregator/notify.go, docs/service.md).
const (
	listenVar  = "LOGAGG_LISTEN="
	metricsVar = "LOGAGG_METRICS="
	readyState = "READY=1"
)

// ErrNotReady is wrapped by Start's error when the aggregator did not say
// READY=1: it exited, StartTimeout passed, or ctx ended.
var ErrNotReady = errors.New("aggregator not ready")

// Aggregator is how to start our aggregator. It is data: nothing happens
// until Start.
type Aggregator struct {
	Bin  string   // the aggregator binary (required)
	Args []string // its arguments
	// Env is added to this process's environment; NOTIFY_SOCKET is the
	// harness's whatever Env says.
	Env []string
	// Stderr receives the aggregator's log as it is written (nil: it is
	// only kept, its tail quoted in errors).
	Stderr io.Writer
	// StartTimeout bounds the wait for READY=1 (0: DefaultStartTimeout).
	StartTimeout time.Duration
	// StopTimeout is how long Stop, or the end of Start's ctx, waits after
	// SIGTERM for the drain before SIGKILL (0: DefaultStopTimeout).
	StopTimeout time.Duration
}

// Proc is a started aggregator that said READY=1.
type Proc struct {
	cmd         *exec.Cmd
	stderr      *tailWriter
	stopTimeout time.Duration

	mu      sync.Mutex
	listen  []string
	metrics string

	exited  chan struct{} // closed once the process was reaped
	waitErr error         // cmd.Wait's, valid after exited
}

// Start starts the aggregator and returns once it has sent READY=1, with
// the addresses it sent before it. ctx bounds the process's life (its end
// sends SIGTERM, then SIGKILL after StopTimeout), not only the start.
func (a Aggregator) Start(ctx context.Context) (*Proc, error) {
	if a.Bin == "" {
		return nil, errors.New("harness: no aggregator binary")
	}
	startTimeout := orDefault(a.StartTimeout, DefaultStartTimeout)
	n, err := listenNotify()
	if err != nil {
		return nil, err
	}
	p := &Proc{
		stderr:      &tailWriter{echo: a.Stderr},
		stopTimeout: orDefault(a.StopTimeout, DefaultStopTimeout),
		exited:      make(chan struct{}),
	}
	cmd := exec.CommandContext(ctx, a.Bin, a.Args...)
	// Later entries win in exec.Cmd.Env: ours over an inherited one.
	cmd.Env = append(append(os.Environ(), a.Env...), "NOTIFY_SOCKET="+n.path)
	cmd.Stderr = p.stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = p.stopTimeout
	// An aggregator outliving a killed ipcbench would hold its sockets.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd = cmd
	if err := cmd.Start(); err != nil {
		n.close()
		return nil, fmt.Errorf("start aggregator: %w", err)
	}
	ready := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		n.read(func(listen []string, metrics string) {
			p.mu.Lock()
			first := p.listen == nil
			p.listen, p.metrics = listen, metrics
			p.mu.Unlock()
			if first {
				close(ready)
			}
		})
	}()
	go func() {
		p.waitErr = cmd.Wait()
		n.close()
		<-readerDone
		close(p.exited)
	}()

	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case <-ready:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("%w: it exited at start-up (%w):\n%s", ErrNotReady, p.waitErr, p.StderrTail())
	case <-timer.C:
		p.Kill()
		return nil, fmt.Errorf("%w: no READY=1 within %v:\n%s", ErrNotReady, startTimeout, p.StderrTail())
	case <-ctx.Done():
		p.Kill()
		return nil, fmt.Errorf("%w: %w", ErrNotReady, ctx.Err())
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Pid is the aggregator's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Listen returns the URLs the aggregator listens on, as it bound them (the
// real port where a tcp:// or udp:// URL asked for port 0).
func (p *Proc) Listen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.listen...)
}

// Bound returns the bound URL of the listener asked for as asked: asked
// itself when it is bound as written, else the one bound URL of the same
// scheme (tcp://127.0.0.1:0 → tcp://127.0.0.1:41234); "" when there is
// none or several.
func (p *Proc) Bound(asked string) string {
	scheme, _, _ := strings.Cut(asked, "://")
	var found []string
	for _, u := range p.Listen() {
		if u == asked {
			return u
		}
		if s, _, _ := strings.Cut(u, "://"); s == scheme {
			found = append(found, u)
		}
	}
	if len(found) != 1 {
		return ""
	}
	return found[0]
}

// Metrics is the URL of the aggregator's Prometheus metrics
// (http://127.0.0.1:PORT/metrics), or "" when it serves none (no
// --metrics).
func (p *Proc) Metrics() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.metrics
}

// StderrTail is the end of what the aggregator wrote to stderr so far.
func (p *Proc) StderrTail() string { return p.stderr.tail() }

// Done is closed once the process has exited and was reaped.
func (p *Proc) Done() <-chan struct{} { return p.exited }

// Stop sends SIGTERM, waits up to StopTimeout for the drain (then kills
// the process) and returns its final state: CPU times (UserTime,
// SystemTime) and exit status. A non-zero exit, such as the one that
// reports records accepted but not written, is an error quoting the
// stderr tail. Stop may be called again; it returns the same.
func (p *Proc) Stop() (*os.ProcessState, error) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM) // fails only once it has exited
	timer := time.NewTimer(p.stopTimeout)
	defer timer.Stop()
	select {
	case <-p.exited:
	case <-timer.C:
		p.Kill()
		return p.cmd.ProcessState, fmt.Errorf("aggregator did not exit within %v of SIGTERM, killed:\n%s", p.stopTimeout, p.StderrTail())
	}
	if p.waitErr != nil {
		return p.cmd.ProcessState, fmt.Errorf("aggregator: %w:\n%s", p.waitErr, p.StderrTail())
	}
	return p.cmd.ProcessState, nil
}

// Kill ends the process at once, without a drain, and waits until it
// was reaped.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// tailKeep is how much of the aggregator's stderr is kept for errors:
// enough for the lines before a failure, bounded however long it runs.
const tailKeep = 16 << 10

// tailWriter keeps the last tailKeep bytes written and passes everything
// on to echo. An echo that fails is dropped, not the aggregator's stderr:
// a failing write would end exec's copy and the aggregator would take
// SIGPIPE.
type tailWriter struct {
	mu   sync.Mutex
	buf  []byte
	echo io.Writer
}

func (w *tailWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	if over := len(w.buf) - tailKeep; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	if w.echo != nil {
		if _, err := w.echo.Write(b); err != nil {
			w.echo = nil
		}
	}
	return len(b), nil
}

// tail is the kept text from its first whole line.
func (w *tailWriter) tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := string(w.buf)
	if len(w.buf) == tailKeep {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return strings.TrimSpace(s)
}

// notifySocket is the harness's $NOTIFY_SOCKET: a unixgram socket in a
// directory only this user may enter, so no other user's process can
// claim readiness for the aggregator.
type notifySocket struct {
	dir, path string
	conn      *net.UnixConn
}

func listenNotify() (*notifySocket, error) {
	dir, err := os.MkdirTemp("", "logagg-notify-") // mode 0700
	if err != nil {
		return nil, fmt.Errorf("notify socket: %w", err)
	}
	path := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("notify socket: %w", err)
	}
	return &notifySocket{dir: dir, path: path, conn: conn}, nil
}

// read reads notifications until the socket is closed, and calls ready
// with the addresses sent since the previous READY=1 at every READY=1 (at
// start-up, and after each reload).
func (n *notifySocket) read(ready func(listen []string, metrics string)) {
	buf := make([]byte, 64<<10)
	listen, metrics := []string{}, ""
	for {
		k, err := n.conn.Read(buf)
		if err != nil {
			return
		}
		for _, line := range strings.Split(string(buf[:k]), "\n") {
			switch {
			case strings.HasPrefix(line, listenVar):
				listen = append(listen, strings.TrimPrefix(line, listenVar))
			case strings.HasPrefix(line, metricsVar):
				metrics = strings.TrimPrefix(line, metricsVar)
			case line == readyState:
				ready(listen, metrics)
				listen, metrics = []string{}, ""
			}
		}
	}
}

func (n *notifySocket) close() {
	n.conn.Close()
	os.RemoveAll(n.dir)
}
