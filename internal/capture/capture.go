// Package capture runs a child process and turns its standard output and
// standard error into records, the way a container runtime captures a
// container's output: each stream is a pipe read by its own stream.Reader
// (newline framing; an unterminated last line is kept, flagged partial), and
// every record carries agg.stream "stdout" or "stderr", agg.transport
// "exec", agg.listener "exec:///path/of/cmd" and the child's pid/uid/gid
// (agg.peer.via "kernel": we created the process, so its identity is known,
// not looked up). When the child has exited and both pipes are drained, one
// more record states the exit status:
//
//	{"event":"exit","message":"process exited with code 3","pid":42,"exit_code":3,"signal":"","agg":{…}}
//
// # Lifecycle
//
// New resolves the command (a missing program is an error at start-up). The
// Child is a listener its owner hands to the daemon explicitly
// (daemon.WithSource); the daemon gives it its Deps through Bind, which
// creates the pipes, and calls Run, which starts the process. Run returns once the child exited, both pipes
// were read to EOF (or, if a grandchild keeps them open, for at most
// Options.DrainGrace after the exit, then what they buffer) and the exit
// record was submitted; Done is closed then and Status is final.
//
// The child runs in its own process group, so a terminal's Ctrl-C reaches it
// only through Signal, exactly once; Signal sends to the whole group, so a
// `sh -c` wrapper and what it started both get it. Its standard input is
// Command.Stdin, or /dev/null.
//
// When ctx ends before the child exited (another listener failed, or the
// aggregator is told to stop without the child's consent), Run sends
// SIGTERM to the group, keeps capturing, and sends SIGKILL when the sink's
// hard stop ends.
//
// # Concurrency
//
// Signal, Done, Status and URL are safe for concurrent use with Run.
package capture

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/stream"
)

// Scheme is the scheme of a child's URL and its records' agg.transport.
const Scheme = "exec"

var (
	// ErrNotStarted is returned by Signal before Run started the child.
	ErrNotStarted = errors.New("child not started")
	// ErrExited is returned by Signal after the child exited.
	ErrExited = errors.New("child already exited")
)

// Command is what to run.
type Command struct {
	Argv  []string // program (looked up in PATH) and arguments
	Env   []string // nil: the aggregator's environment
	Dir   string   // "": the aggregator's working directory
	Stdin *os.File // nil: /dev/null
}

// Status is how the child ended.
type Status struct {
	Exited   bool           // the child ran and was reaped
	Code     int            // exit code, -1 if killed by a signal
	Signal   syscall.Signal // the signal that killed it, or 0
	StartErr error          // the child could not be started
}

// ExitCode is the status a shell would report: the exit code, 128+signal
// when killed, 127 when it could not be started.
func (s Status) ExitCode() int {
	switch {
	case s.StartErr != nil:
		return 127
	case s.Signal != 0:
		return 128 + int(s.Signal)
	}
	return s.Code
}

// Child is one captured process. See the package doc for its lifecycle.
type Child struct {
	cmd  Command
	path string
	url  string
	d    transport.Deps

	outR, outW, errR, errW *os.File

	mu      sync.Mutex
	proc    *os.Process
	exited  bool
	status  Status
	done    chan struct{}
	closeMu sync.Once
}

// New resolves cmd.Argv[0]. Nothing runs until Run; Bind must come first.
func New(cmd Command) (*Child, error) {
	if len(cmd.Argv) == 0 || cmd.Argv[0] == "" {
		return nil, errors.New("capture: no command")
	}
	path, err := exec.LookPath(cmd.Argv[0])
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	u := (&url.URL{Scheme: Scheme, Path: path}).String()
	return &Child{cmd: cmd, path: path, url: u, done: make(chan struct{})}, nil
}

// Bind creates the pipes with deps d (d.Sink is required). The daemon calls
// it for a child given with daemon.WithSource; code that runs a Child
// without the daemon calls it before Run.
func (c *Child) Bind(d transport.Deps) error {
	if d.Sink == nil {
		return errors.New("capture: Deps.Sink is nil")
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	c.d = d
	var err error
	if c.outR, c.outW, err = os.Pipe(); err != nil {
		return fmt.Errorf("capture: stdout pipe: %w", err)
	}
	if c.errR, c.errW, err = os.Pipe(); err != nil {
		c.Close()
		return fmt.Errorf("capture: stderr pipe: %w", err)
	}
	if n := d.Opts.RcvBuf; n > 0 {
		// A bigger pipe lets a chatty child run ahead of a busy pipeline
		// before it blocks; failure only means the default 64 KiB.
		for _, f := range []*os.File{c.outR, c.errR} {
			if rc, err := f.SyscallConn(); err == nil {
				rc.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETPIPE_SZ, n) })
			}
		}
	}
	return nil
}

// URL implements transport.Listener.
func (c *Child) URL() string { return c.url }

// Close implements transport.Listener: it releases the pipes.
func (c *Child) Close() error {
	c.closeMu.Do(func() {
		for _, f := range []*os.File{c.outR, c.outW, c.errR, c.errW} {
			if f != nil {
				f.Close()
			}
		}
	})
	return nil
}

// Done is closed when Run has submitted the exit record (or failed).
func (c *Child) Done() <-chan struct{} { return c.done }

// Status is the child's final status once Done is closed.
func (c *Child) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// PID is the child's pid, 0 before it started.
func (c *Child) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return 0
	}
	return c.proc.Pid
}

// Signal sends sig to the child's process group.
func (c *Child) Signal(sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.proc == nil:
		return ErrNotStarted
	case c.exited: // reaped: its pid may already belong to someone else
		return ErrExited
	}
	if err := unix.Kill(-c.proc.Pid, sig); err != nil {
		return fmt.Errorf("signal %v to process group %d: %w", sig, c.proc.Pid, err)
	}
	return nil
}

// Run implements transport.Listener: it starts the child and captures it
// until it exited and its output is drained.
func (c *Child) Run(ctx context.Context) error {
	defer close(c.done)
	defer c.Close()
	if c.outR == nil {
		return errors.New("capture: Run before Bind")
	}
	cmd := exec.Command(c.path)
	cmd.Args = c.cmd.Argv
	cmd.Env = c.cmd.Env
	cmd.Dir = c.cmd.Dir
	if c.cmd.Stdin != nil {
		cmd.Stdin = c.cmd.Stdin
	}
	cmd.Stdout, cmd.Stderr = c.outW, c.errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		c.mu.Lock()
		c.status = Status{StartErr: err, Code: -1}
		c.mu.Unlock()
		return fmt.Errorf("start %s: %w", c.path, err)
	}
	// Only the child holds the write ends now: EOF comes when it (and any
	// process it passed them on to) is gone.
	c.outW.Close()
	c.errW.Close()
	c.mu.Lock()
	c.proc = cmd.Process
	c.mu.Unlock()

	peer := record.Peer{HasCreds: true, PID: int32(cmd.Process.Pid), UID: uint32(os.Geteuid()), GID: uint32(os.Getegid()), Via: "kernel"}
	newMeta := func(stream string) *record.Meta {
		m := &record.Meta{Transport: Scheme, Listener: c.url, Peer: peer, Stream: stream, ParseHostname: true}
		m.Prepare()
		return m
	}

	var wg sync.WaitGroup
	readErrs := make([]error, 2)
	for i, s := range []struct {
		f    *os.File
		name string
	}{{c.outR, "stdout"}, {c.errR, "stderr"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			readErrs[i] = c.capture(s.f, newMeta(s.name))
		}()
	}
	readersDone := make(chan struct{})
	go func() { wg.Wait(); close(readersDone) }()

	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()

	// Until the child exits: an ended ctx asks it to stop, the hard stop
	// makes it.
	stopAsked := ctx.Done()
	hard := c.d.Sink.HardStop().Done()
wait:
	for {
		select {
		case <-exited:
			break wait
		case <-stopAsked:
			stopAsked = nil
			c.Signal(syscall.SIGTERM)
		case <-hard:
			hard = nil
			c.Signal(syscall.SIGKILL)
		}
	}
	st := statusOf(cmd.ProcessState, waitErr)
	c.mu.Lock()
	c.exited = true
	c.status = st
	c.mu.Unlock()

	// Output a grandchild still writes is read for DrainGrace, then the
	// readers take what is buffered and stop.
	grace := time.NewTimer(c.d.Opts.DrainGrace)
	select {
	case <-readersDone:
	case <-grace.C:
		c.outR.SetReadDeadline(time.Now())
		c.errR.SetReadDeadline(time.Now())
		<-readersDone
	case <-c.d.Sink.HardStop().Done():
		c.outR.SetReadDeadline(time.Now())
		c.errR.SetReadDeadline(time.Now())
		<-readersDone
	}
	grace.Stop()

	err := c.exitRecord(st, peer)
	for _, re := range readErrs {
		if re != nil && err == nil && c.d.Sink.HardStop().Err() == nil {
			err = re
		}
	}
	return err
}

// capture reads one pipe until EOF; after a deadline (grace over) it reads
// what is buffered without waiting.
func (c *Child) capture(f *os.File, meta *record.Meta) error {
	rd := stream.NewReader(meta, c.d, false)
	defer rd.Release()
	_, err := rd.ReadFrom(f)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = nil
		if f.SetReadDeadline(time.Time{}) == nil {
			if rc, rerr := f.SyscallConn(); rerr == nil {
				_, err = rd.ReadFrom(&stream.DrainReader{RC: rc, Until: time.Now().Add(c.d.Opts.DrainGrace)})
			}
		}
	}
	if ferr := rd.Finish(); err == nil {
		err = ferr
	}
	if err != nil {
		return fmt.Errorf("capture %s: %w", meta.Stream, err)
	}
	return nil
}

// exitRecord submits the record that states how the child ended, through
// the same encoder as everything else so it gets the agg envelope.
func (c *Child) exitRecord(st Status, peer record.Peer) error {
	var b []byte
	b = append(b, `{"event":"exit","message":`...)
	msg := "process exited with code " + strconv.Itoa(st.Code)
	sig := ""
	if st.Signal != 0 {
		sig = unix.SignalName(st.Signal)
		msg = "process killed by " + sig
	}
	b = strconv.AppendQuote(b, msg)
	b = append(b, `,"pid":`...)
	b = strconv.AppendInt(b, int64(peer.PID), 10)
	b = append(b, `,"exit_code":`...)
	b = strconv.AppendInt(b, int64(st.ExitCode()), 10)
	b = append(b, `,"signal":`...)
	b = strconv.AppendQuote(b, sig)
	b = append(b, "}\n"...)
	meta := &record.Meta{Transport: Scheme, Listener: c.url, Peer: peer, ParseHostname: true}
	meta.Prepare()
	if err := stream.Serve(bytes.NewReader(b), meta, c.d, false); err != nil {
		return fmt.Errorf("capture: exit record: %w", err)
	}
	return nil
}

func statusOf(ps *os.ProcessState, waitErr error) Status {
	if ps == nil {
		return Status{Exited: true, Code: -1, StartErr: waitErr}
	}
	st := Status{Exited: true, Code: ps.ExitCode()}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		st.Signal = ws.Signal()
	}
	return st
}
