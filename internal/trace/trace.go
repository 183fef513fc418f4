package trace

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ipclab/logagg/bpftrace"
)

// Target is the process a script traces; it becomes the script's $1.
type Target struct {
	PID int // 0 traces every process
}

// Options tune one run. The zero value is usable; each field documents its
// default.
type Options struct {
	// Bpftrace is the binary; default "bpftrace" on PATH.
	Bpftrace string
	// Args are extra positional parameters, passed after the PID ($2, $3, ...).
	Args []string
	// AttachTimeout bounds the wait for the attached_probes line; default 60 s
	// (bpftrace 0.17 compiles with LLVM first: about 1 s per script here, and
	// much longer for wildcard probes).
	AttachTimeout time.Duration
	// StopTimeout bounds the wait after SIGINT for bpftrace to print its maps
	// and exit before it is killed; default 30 s.
	StopTimeout time.Duration
	// Stderr, if set, receives a copy of bpftrace's stderr.
	Stderr io.Writer
	// OnPrintf, if set, is called from the reading goroutine for every printf
	// line as it arrives (e.g. write_bytes_per_sec's per-second lines).
	// It is not called with OutputFile.
	OnPrintf func(string)
	// OutputFile, if set, is where bpftrace writes its output (-o FILE)
	// instead of a pipe to this process: nothing of what it prints passes
	// through this process while it runs, which matters when this process
	// is the workload being measured (tracebench.RunOverhead). The file is
	// read for the attached_probes line at the start and in full once
	// bpftrace has exited; it is left in place.
	OutputFile string
}

func (o *Options) defaults() {
	if o.AttachTimeout <= 0 {
		o.AttachTimeout = 60 * time.Second
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 30 * time.Second
	}
}

// Session is one running bpftrace. Stop must be called exactly once (it
// releases the process); Stop and Exited may be called from any goroutine,
// the other methods are read-only.
type Session struct {
	cmd        *exec.Cmd
	opts       Options
	cleanup    func()
	AttachTime time.Duration // from exec to the attached_probes line

	readDone chan struct{} // closed when stdout is drained
	exited   chan struct{} // closed when the process has exited
	waitErr  error         // valid after exited is closed
	out      *Output       // owned by the reader until readDone
	readErr  error
	stderr   lockedBuffer

	stopOnce sync.Once
	stopOut  *Output
	stopErr  error
}

// Run traces target with script until ctx is done (or bpftrace exits on its
// own, e.g. by calling exit()), then stops bpftrace cleanly and returns what
// it printed. The end of ctx is the normal way to end a run, not an error.
//
// script is a path to a .bt file, or the name of a script shipped in
// package bpftrace ("producer_syscalls").
func Run(ctx context.Context, script string, target Target, opts Options) (*Output, error) {
	s, err := Start(ctx, script, target, opts)
	if err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
	case <-s.exited:
	}
	return s.Stop()
}

// Start runs the pre-flight checks (privileges, bpftrace on PATH, tracefs,
// every probe the script names), starts `bpftrace -f json SCRIPT PID
// ARGS...` and returns once bpftrace has attached its probes, so that a
// workload started afterwards is traced from its first event. ctx bounds
// only the start: cancelling it before attachment kills bpftrace.
func Start(ctx context.Context, script string, target Target, opts Options) (*Session, error) {
	opts.defaults()
	if target.PID < 0 {
		return nil, fmt.Errorf("trace: negative pid %d", target.PID)
	}
	if err := CheckPrivileges(); err != nil {
		return nil, err
	}
	bin, err := LookBpftrace(opts.Bpftrace)
	if err != nil {
		return nil, err
	}
	if err := EnsureTracefs(); err != nil {
		return nil, err
	}
	path, src, cleanup, err := resolveScript(script)
	if err != nil {
		return nil, err
	}
	if err := CheckProbes(src, bin); err != nil {
		cleanup()
		return nil, fmt.Errorf("trace: %s: %w", filepath.Base(path), err)
	}

	args := []string{"-f", "json"}
	if opts.OutputFile != "" {
		args = append(args, "-o", opts.OutputFile)
	}
	args = append(append(args, path, strconv.Itoa(target.PID)), opts.Args...)
	cmd := exec.Command(bin, args...)
	// If we die, bpftrace must not keep tracing with nobody to stop it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stdout io.ReadCloser
	if opts.OutputFile == "" {
		if stdout, err = cmd.StdoutPipe(); err != nil {
			cleanup()
			return nil, fmt.Errorf("trace: %w", err)
		}
	}
	s := &Session{
		cmd: cmd, opts: opts, cleanup: cleanup,
		readDone: make(chan struct{}), exited: make(chan struct{}),
		out: newOutput(),
	}
	if opts.Stderr != nil {
		cmd.Stderr = io.MultiWriter(&s.stderr, opts.Stderr)
	} else {
		cmd.Stderr = &s.stderr
	}
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		cleanup()
		return nil, fmt.Errorf("trace: starting %s: %w", bin, err)
	}
	attached := make(chan struct{})
	if stdout != nil {
		go s.read(stdout, attached)
		go func() {
			<-s.readDone // Wait closes stdout: drain it first
			s.waitErr = cmd.Wait()
			close(s.exited)
		}()
	} else {
		procDone := make(chan struct{})
		go func() {
			s.waitErr = cmd.Wait()
			close(procDone)
		}()
		go func() {
			s.readFile(opts.OutputFile, attached, procDone)
			close(s.exited)
		}()
	}

	timer := time.NewTimer(opts.AttachTimeout)
	defer timer.Stop()
	select {
	case <-attached:
		// bpftrace 0.17 prints attached_probes before it attaches, and a
		// SIGINT that arrives before its event loop runs is lost; so wait
		// until its perf_event fds (one per probe) exist.
		if err = s.waitProbesLive(ctx, timer.C); err == nil {
			s.AttachTime = time.Since(begin)
			return s, nil
		}
	case <-s.exited:
		err = fmt.Errorf("trace: %s: %w: %w: %s", filepath.Base(path), ErrNotAttached, s.waitErr, s.stderrText())
	case <-timer.C:
		err = fmt.Errorf("trace: %s: %w: no attached_probes line within %v: %s", filepath.Base(path), ErrNotAttached, opts.AttachTimeout, s.stderrText())
	case <-ctx.Done():
		err = fmt.Errorf("trace: %s: %w", filepath.Base(path), ctx.Err())
	}
	_ = cmd.Process.Kill()
	<-s.exited
	cleanup()
	return nil, err
}

// waitProbesLive polls bpftrace's fds until it holds at least one
// perf_event fd per attached probe.
func (s *Session) waitProbesLive(ctx context.Context, timeout <-chan time.Time) error {
	want := s.out.AttachedProbes // written before attached was closed
	dir := fmt.Sprintf("/proc/%d/fd", s.cmd.Process.Pid)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if countPerfFds(dir) >= want {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("trace: %w: %w: %s", ErrNotAttached, s.waitErr, s.stderrText())
		case <-timeout:
			return fmt.Errorf("trace: %w: %d probes announced, not attached within %v: %s", ErrNotAttached, want, s.opts.AttachTimeout, s.stderrText())
		case <-ctx.Done():
			return fmt.Errorf("trace: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

func countPerfFds(dir string) int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == "anon_inode:[perf_event]" {
			n++
		}
	}
	return n
}

// read decodes stdout until EOF; it signals attached once, at the
// attached_probes line.
func (s *Session) read(r io.Reader, attached chan struct{}) {
	defer close(s.readDone)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), maxLine)
	signalled := false
	for sc.Scan() {
		nPrintf := len(s.out.Printf)
		if err := s.out.addLine(sc.Bytes()); err != nil && s.readErr == nil {
			s.readErr = err // keep reading: the maps that follow are still good
		}
		if s.opts.OnPrintf != nil && len(s.out.Printf) > nPrintf {
			s.opts.OnPrintf(s.out.Printf[nPrintf])
		}
		if !signalled && s.out.AttachedProbes > 0 {
			signalled = true
			close(attached)
		}
	}
	if err := sc.Err(); err != nil && s.readErr == nil {
		s.readErr = err
	}
	_, _ = io.Copy(io.Discard, r) // an over-long line stopped the scanner: let bpftrace finish
}

// readFile is read for OutputFile: it polls the file until the
// attached_probes line (or bpftrace's exit), then waits for the exit and
// decodes the rest.
func (s *Session) readFile(path string, attached chan struct{}, procDone <-chan struct{}) {
	defer close(s.readDone)
	var f *os.File
	var rd *bufio.Reader
	var carry []byte
	// next decodes the complete lines available now (all of them, the
	// last one without its newline too, when final).
	next := func(final bool) {
		if f == nil {
			var err error
			if f, err = os.Open(path); err != nil {
				return
			}
			rd = bufio.NewReaderSize(f, 64<<10)
		}
		for {
			b, err := rd.ReadSlice('\n')
			carry = append(carry, b...)
			if errors.Is(err, bufio.ErrBufferFull) {
				if len(carry) > maxLine && s.readErr == nil {
					s.readErr = fmt.Errorf("output line over %d bytes", maxLine)
				}
				continue
			}
			if err != nil && !(final && len(carry) > 0) {
				return // io.EOF: keep the partial line for later
			}
			if line := bytes.TrimSpace(carry); len(line) > 0 {
				if aerr := s.out.addLine(line); aerr != nil && s.readErr == nil {
					s.readErr = aerr
				}
			}
			carry = carry[:0]
			if err != nil {
				return
			}
		}
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
wait:
	for s.out.AttachedProbes == 0 {
		next(false)
		if s.out.AttachedProbes > 0 {
			break
		}
		select {
		case <-procDone:
			break wait
		case <-tick.C:
		}
	}
	if s.out.AttachedProbes > 0 {
		close(attached)
	}
	<-procDone
	next(true)
	if f != nil {
		f.Close()
	}
}

// Exited is closed when bpftrace has exited (on its own or after Stop).
func (s *Session) Exited() <-chan struct{} { return s.exited }

// Pid is bpftrace's process id.
func (s *Session) Pid() int { return s.cmd.Process.Pid }

// Stop sends SIGINT, waits up to StopTimeout for bpftrace to print its maps
// and exit (then kills it and returns ErrStopTimeout), and returns the
// decoded output. Calling it again returns the same result.
func (s *Session) Stop() (*Output, error) {
	s.stopOnce.Do(func() {
		s.stopOut, s.stopErr = s.stop()
		s.cleanup()
	})
	return s.stopOut, s.stopErr
}

func (s *Session) stop() (*Output, error) {
	select {
	case <-s.exited:
	default:
		_ = s.cmd.Process.Signal(os.Interrupt)
		t := time.NewTimer(s.opts.StopTimeout)
		defer t.Stop()
		// Repeat SIGINT: bpftrace 0.17 can miss one that lands while it is
		// still setting up, and a second one while it prints is harmless.
		resend := time.NewTicker(2 * time.Second)
		defer resend.Stop()
	wait:
		for {
			select {
			case <-s.exited:
				break wait
			case <-resend.C:
				_ = s.cmd.Process.Signal(os.Interrupt)
			case <-t.C:
				_ = s.cmd.Process.Kill()
				<-s.exited
				return s.out, fmt.Errorf("trace: %w within %v: %s", ErrStopTimeout, s.opts.StopTimeout, s.stderrText())
			}
		}
	}
	if s.readErr != nil {
		return s.out, fmt.Errorf("trace: %w", s.readErr)
	}
	if s.waitErr != nil {
		return s.out, fmt.Errorf("trace: bpftrace: %w: %s", s.waitErr, s.stderrText())
	}
	return s.out, nil
}

// Stderr returns what bpftrace wrote to stderr so far, without the harmless
// RLIMIT_MEMLOCK warning bpftrace 0.17 prints on kernels that account BPF
// memory to cgroups.
func (s *Session) Stderr() string { return s.stderrText() }

func (s *Session) stderrText() string {
	var keep []string
	for _, l := range strings.Split(s.stderr.String(), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.Contains(l, "RLIMIT_MEMLOCK") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "; ")
}

// resolveScript returns a file bpftrace can read, its text, and a cleanup.
// Shipped scripts are written to a temporary file because bpftrace reads
// positional parameters only with a program file.
func resolveScript(script string) (path string, src []byte, cleanup func(), err error) {
	nop := func() {}
	if strings.ContainsRune(script, os.PathSeparator) || strings.HasSuffix(script, ".bt") {
		if src, err = os.ReadFile(script); err == nil {
			return script, src, nop, nil
		}
		if !errors.Is(err, os.ErrNotExist) || strings.ContainsRune(script, os.PathSeparator) {
			return "", nil, nop, fmt.Errorf("trace: %w", err)
		}
	}
	src, err = bpftrace.Source(script)
	if err != nil {
		return "", nil, nop, fmt.Errorf("trace: %w", err)
	}
	dir, err := os.MkdirTemp("", "logagg-bt")
	if err != nil {
		return "", nil, nop, fmt.Errorf("trace: %w", err)
	}
	path = filepath.Join(dir, strings.TrimSuffix(script, ".bt")+".bt")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		os.RemoveAll(dir)
		return "", nil, nop, fmt.Errorf("trace: %w", err)
	}
	return path, src, func() { os.RemoveAll(dir) }, nil
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
