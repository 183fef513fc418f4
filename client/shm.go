package client

import (
	"fmt"
	"net/url"
	"strconv"

	"github.com/ipclab/logagg/internal/shmring"
)

// shm:///path/to/control.sock connects to the aggregator's control socket
// and writes into the shared-memory ring it hands back. One Write is one
// ring frame (one or more complete newline-terminated records); a Write
// larger than MaxMessage fails with an error wrapping shmring.ErrTooLarge
// (nothing is truncated). Write blocks while the ring is full. ?spin=N sets
// how long a Write polls a full ring before it sleeps.
func init() { registerDialer("shm", dialSHM) }

func dialSHM(u *url.URL) (Conn, int, error) {
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
	w, err := shmring.Dial(path)
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
