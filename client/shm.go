package client

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/ipclab/logagg/internal/shmring"
)

// shm:///path/to/control.sock connects to the aggregator's control socket
// and writes into the shared-memory ring it hands back. One Write is one
// ring frame (one or more complete newline-terminated records); a Write
// larger than MaxMessage fails with an error wrapping shmring.ErrTooLarge
// (nothing is truncated). Write blocks while the ring is full. ?spin=N sets
// how long a Write polls a full ring before it sleeps.
//
// The aggregator releases a frame's space only once its records are
// written to its output, so the ring holds everything not yet written.
// With WithReconnect a Writer whose aggregator died or closed the ring
// dials again and offers the new ring every frame the old one did not
// release (see resumer), and Close waits until the aggregator released
// everything.
func init() { registerDialer("shm", dialSHM) }

// dialSHM checks that the control socket, and the process serving it, are
// the aggregator's before the ring is received and mapped.
func dialSHM(u *url.URL, trusted owners) (Conn, int, error) {
	path := u.Path
	if u.Host != "" {
		path = u.Host + u.Path
	}
	if path == "" {
		path = u.Opaque
	}
	if path == "" {
		return nil, 0, fmt.Errorf("shm: %q needs a control socket path, e.g. shm:///run/logagg.shm.sock", u.Redacted())
	}
	ctl, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, 0, fmt.Errorf("shmring: dial %s: %w", path, err)
	}
	if err := trusted.checkSocket(path, ctl); err != nil {
		ctl.Close()
		return nil, 0, err
	}
	w, err := shmring.DialConn(ctl)
	if err != nil {
		return nil, 0, err
	}
	if s := u.Query().Get("spin"); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			w.SetSpin(n)
		}
	}
	return &shmConn{w: w}, w.MaxFrame(), nil
}

// shmConn adapts the ring's writer to Conn. It needs no lock of its own
// although the ring has a single producer side: the Writer makes every call
// under its mutex (see Conn).
type shmConn struct {
	w *shmring.Writer
}

func (c *shmConn) Write(p []byte) (int, error) {
	if err := c.w.Write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *shmConn) Close() error {
	return c.w.Close()
}

// peerGone implements resumer: the aggregator died or closed the ring.
func (c *shmConn) peerGone(err error) bool { return errors.Is(err, shmring.ErrClosed) }

// takeOver implements resumer: every frame old's aggregator did not
// release goes into this ring, in order. They may have been read, even
// written, by the old aggregator, which died before it said so: the
// duplicates at-least-once delivery allows.
func (c *shmConn) takeOver(old Conn) error {
	o, ok := old.(*shmConn)
	if !ok {
		return fmt.Errorf("shm: cannot take over a %T", old)
	}
	return o.w.Unreleased(c.w.Write)
}

// awaitDelivered implements resumer.
func (c *shmConn) awaitDelivered(d time.Duration) error { return c.w.WaitReleased(d) }

// undelivered implements resumer: records in frames not released. A frame
// is one record, or an RFC 7464 sequence of them (packed by the Writer).
func (c *shmConn) undelivered() int {
	n := 0
	c.w.Unreleased(func(f []byte) error {
		if len(f) > 0 && f[0] == recordSeparator {
			for _, b := range f {
				if b == recordSeparator {
					n++
				}
			}
		} else {
			n++
		}
		return nil
	})
	return n
}
