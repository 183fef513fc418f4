// Package stdin is the standard-input listener (scheme "stdin", URL
// "stdin://"): `some-program | aggregator --listen stdin://` turns each line
// of some-program's output into a record (newline framing, no octet
// counting; records carry agg.transport "stdin" and no peer).
//
// # End of input
//
// At EOF Run submits everything, the last unterminated line flagged
// partial, and returns nil. The daemon runs until all its listeners have
// returned, so with stdin:// as the only listener the aggregator exits 0
// once the input ended and everything is written and fsynced, like cat.
// With other listeners, EOF on stdin only ends this one. A terminal hangup
// (EIO) is treated as the end of input too.
//
// # Shutdown
//
// Reads on a pipe, socket or terminal go through Go's poller: New works on
// a duplicate of the fd set O_NONBLOCK, so ending ctx interrupts a blocked
// read with a deadline; what the kernel already holds is then read until
// EAGAIN or Options.DrainGrace, and submitted. O_NONBLOCK belongs to the
// open file description shared with whoever gave us stdin (the shell), so
// Close restores the original flag; a SIGKILLed aggregator leaves it set.
// A regular file (`aggregator --listen stdin:// < file`) cannot be polled:
// it is read with ordinary reads, which never wait, and ctx is checked
// between reads, so shutdown stops at the next 64 KiB boundary and the
// rest of the file is not read.
//
// # Concurrency
//
// Run is called once; New may be called once per process for the real
// standard input (two stdin:// listeners would split its lines between
// them; config validation rejects the same URL twice).
package stdin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/stream"
)

// Scheme is the URL scheme of this transport.
const Scheme = "stdin"

func init() { transport.Register(Scheme, New) }

// Listener reads records from one file, normally the standard input.
type Listener struct {
	f        *os.File // our duplicate (pollable) or the original (regular file)
	own      bool     // f is our duplicate and ours to close
	origFD   int      // the fd we were given, whose flags we restore
	restore  bool     // origFD was blocking: clear O_NONBLOCK again on Close
	pollable bool
	url      string
	d        transport.Deps

	closeOnce sync.Once
	closeErr  error
}

// New opens a listener on the process's standard input. The only accepted
// URL is stdin:// (stdin:/// and stdin: are the same).
func New(u *url.URL, d transport.Deps) (transport.Listener, error) {
	if u.Host != "" || (u.Path != "" && u.Path != "/") || u.Opaque != "" || u.RawQuery != "" {
		return nil, fmt.Errorf("%w: %s: want stdin:// (standard input has no address)", transport.ErrBadAddress, u.Redacted())
	}
	return NewFile(os.Stdin, d)
}

// NewFile serves f instead of the standard input (tests, or an inherited
// pipe). The listener does not close f itself, only its duplicate.
func NewFile(f *os.File, d transport.Deps) (*Listener, error) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Sink == nil {
		return nil, errors.New("stdin: Deps.Sink is nil")
	}
	l := &Listener{url: Scheme + "://", d: d}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("stdin: %w", err)
	}
	var fd int
	rc.Control(func(p uintptr) { fd = int(p) })
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stdin: fstat: %w", err)
	}
	l.origFD = fd
	if m := st.Mode & unix.S_IFMT; m == unix.S_IFREG || m == unix.S_IFBLK {
		l.f = f
		return l, nil
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return nil, fmt.Errorf("stdin: %w", err)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("stdin: dup: %w", err)
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return nil, fmt.Errorf("stdin: set non-blocking: %w", err)
	}
	l.restore = flags&unix.O_NONBLOCK == 0
	l.own = true
	l.f = os.NewFile(uintptr(dup), "stdin")
	// os.NewFile registers a non-blocking fd with the poller when epoll
	// accepts it (pipes, sockets, terminals); /dev/null and the like are
	// not, and their reads never wait anyway.
	l.pollable = l.f.SetReadDeadline(time.Time{}) == nil
	return l, nil
}

// URL implements transport.Listener.
func (l *Listener) URL() string { return l.url }

// Close implements transport.Listener: it closes our duplicate and restores
// the blocking mode of the original. Safe after Run returned.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		if !l.own {
			return
		}
		l.closeErr = l.f.Close()
		if l.restore {
			if err := unix.SetNonblock(l.origFD, false); err != nil && l.closeErr == nil {
				l.closeErr = fmt.Errorf("stdin: restore blocking mode: %w", err)
			}
		}
	})
	return l.closeErr
}

// Run implements transport.Listener (see the package doc for EOF and
// shutdown).
func (l *Listener) Run(ctx context.Context) error {
	defer l.Close()
	meta := &record.Meta{Transport: Scheme, Listener: l.url, ParseHostname: true}
	meta.Prepare()
	rd := stream.NewReader(meta, l.d, false)
	defer rd.Release()

	if !l.pollable {
		_, err := rd.ReadFrom(&ctxReader{ctx: ctx, r: l.f})
		return l.finish(ctx, rd, err)
	}
	stop := context.AfterFunc(ctx, func() { l.f.SetReadDeadline(time.Now()) })
	_, err := rd.ReadFrom(l.f)
	stop()
	if !errors.Is(err, os.ErrDeadlineExceeded) || ctx.Err() == nil {
		return l.finish(ctx, rd, err)
	}
	// Shutdown: read what is already buffered, without waiting.
	if err := l.f.SetReadDeadline(time.Time{}); err != nil {
		return l.finish(ctx, rd, err)
	}
	rc, err := l.f.SyscallConn()
	if err != nil {
		return l.finish(ctx, rd, err)
	}
	_, err = rd.ReadFrom(&stream.DrainReader{RC: rc, Until: time.Now().Add(l.d.Opts.DrainGrace)})
	return l.finish(ctx, rd, err)
}

// finish submits the rest and turns the read error into Run's result.
func (l *Listener) finish(ctx context.Context, rd *stream.Reader, err error) error {
	ferr := rd.Finish()
	switch {
	case err == nil, errors.Is(err, errStopped), errors.Is(err, syscall.EIO):
		// EOF, shutdown of a regular file, terminal hangup.
	case ctx.Err() != nil:
		// Submit gave up at the hard stop: the drain ended, not a failure.
		return nil
	default:
		return fmt.Errorf("read stdin: %w", err)
	}
	if ferr != nil && ctx.Err() == nil {
		return fmt.Errorf("stdin: %w", ferr)
	}
	return nil
}

var errStopped = errors.New("stopped")

// ctxReader stops reading a regular file once ctx ended.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if c.ctx.Err() != nil {
		return 0, errStopped
	}
	return c.r.Read(p)
}
