package rawchan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
)

// ChildSpec is how to start the echo side of a raw-channel experiment:
// usually this binary re-executed with a hidden subcommand, handed its end
// of the channel as an inherited descriptor. Each experiment speaks its
// own protocol over the channel; what they share is how the child is
// started, watched and reported on. It is data: nothing happens until
// Start.
type ChildSpec struct {
	Exe  string
	Args []string
	// Files become the child's descriptors 3, 4, … in order. Start closes
	// this process's copies: an open copy of the child's end would hide
	// the child's death from the measuring side (no EOF, no EPIPE).
	Files []*os.File
	// ReadStdout makes the child's standard output readable through
	// Child.Stdout (for a readiness line); otherwise it is discarded.
	ReadStdout bool
	// OnExit, if set, runs once the child has been reaped, before Done is
	// closed: to unblock a measuring side that waits on the channel.
	OnExit func()
}

// Child is a started echo side.
type Child struct {
	cmd    *exec.Cmd
	stdout io.Reader
	stderr bytes.Buffer // written until the child is reaped; read after
	done   chan struct{}
	err    error // cmd.Wait's, valid after done
}

// Start starts the child, killed if this process dies (Pdeathsig) or ctx
// ends.
func (s ChildSpec) Start(ctx context.Context) (*Child, error) {
	c := &Child{done: make(chan struct{})}
	c.cmd = exec.CommandContext(ctx, s.Exe, s.Args...)
	c.cmd.Stderr = &c.stderr
	c.cmd.ExtraFiles = s.Files
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if s.ReadStdout {
		out, err := c.cmd.StdoutPipe()
		if err != nil {
			closeAll(s.Files)
			return nil, err
		}
		c.stdout = out
	}
	err := c.cmd.Start()
	closeAll(s.Files)
	if err != nil {
		return nil, fmt.Errorf("start echo side: %w", err)
	}
	go func() {
		c.err = c.cmd.Wait()
		if s.OnExit != nil {
			s.OnExit()
		}
		close(c.done)
	}()
	return c, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// Stdout reads the child's standard output (ChildSpec.ReadStdout); nil
// otherwise. Read it before Wait: the pipe closes when the child is
// reaped.
func (c *Child) Stdout() io.Reader { return c.stdout }

// Done is closed once the child has exited and been reaped.
func (c *Child) Done() <-chan struct{} { return c.done }

// Wait waits for the child to exit and returns how it exited.
func (c *Child) Wait() error {
	<-c.done
	return c.err
}

// Kill kills the child and waits for it; a no-op on one that has exited.
func (c *Child) Kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

// Stderr is what the child wrote to its standard error, trimmed; call it
// after Done.
func (c *Child) Stderr() string {
	select {
	case <-c.done:
		return string(bytes.TrimSpace(c.stderr.Bytes()))
	default:
		return ""
	}
}

// Fail kills the child and returns err with the child's side of the story
// (its exit and what it wrote to stderr), which usually says why the
// measuring side failed: the child's error happened first.
func (c *Child) Fail(err error) error {
	c.Kill()
	if msg := c.Stderr(); msg != "" {
		return fmt.Errorf("%w (echo side: %w: %s)", err, c.exitErr(), msg)
	}
	return err
}

// exitErr is the child's exit as an error, never nil.
func (c *Child) exitErr() error {
	if c.err != nil {
		return c.err
	}
	return errors.New("exit status 0")
}
