package rtt

import (
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/bench/rawchan"
)

// conn is one side of a ping-pong channel. send and recv move exactly
// len(p) bytes as one message; both block. Implementations keep their hot
// path free of allocations.
type conn interface {
	send(p []byte) error
	recv(p []byte) error
	close()
}

// errShortMessage means a message arrived with the wrong length.
var errShortMessage = rawchan.ErrShortMessage

// setRecvTimeout arms SO_RCVTIMEO so a raw blocking datagram receive
// returns now and then to check the abort flag (see rawchan.IO.Raw).
var setRecvTimeout = rawchan.SetRecvTimeout

// streamConn is a byte stream over one or two blocking fds (pipe, fifo,
// unix stream, tcp): messages may be split, so both directions loop.
type streamConn struct {
	r, w int
	raw  bool // raw syscalls, see rawchan.IO.Raw
}

func (c *streamConn) send(p []byte) error { return rawchan.IO{Raw: c.raw}.Send(c.w, p) }
func (c *streamConn) recv(p []byte) error { return rawchan.IO{Raw: c.raw}.Recv(c.r, p) }

func (c *streamConn) close() {
	unix.Close(c.r)
	if c.w != c.r {
		unix.Close(c.w)
	}
}

// dgramConn is one connected datagram socket (unixgram socketpair, udp):
// one message per call.
type dgramConn struct {
	fd    int
	raw   bool
	abort *atomic.Bool // nil on the echo side, which Pdeathsig kills instead
}

func (c *dgramConn) io() rawchan.IO {
	o := rawchan.IO{Dgram: true, Raw: c.raw}
	if c.abort != nil {
		o.Stop = c.abort.Load
	}
	return o
}

func (c *dgramConn) send(p []byte) error { return c.io().Send(c.fd, p) }
func (c *dgramConn) recv(p []byte) error { return c.io().Recv(c.fd, p) }
func (c *dgramConn) close()              { unix.Close(c.fd) }
