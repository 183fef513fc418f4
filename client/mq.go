package client

import (
	"fmt"
	"net/url"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/mqueue"
)

// mq:///NAME opens the POSIX message queue the aggregator created (it is
// not created here: a missing queue means no aggregator, ENOENT). One Write
// is one message (one or more complete newline-terminated records);
// MaxMessage is the queue's msgsize and a longer Write fails with EMSGSIZE.
// Write blocks while the queue is full (backpressure). mq_send is atomic,
// so Writes from several goroutines need no lock.
func init() { registerDialer("mq", dialMQ) }

// dialMQ checks that the queue opened is the aggregator's (fstat of its
// descriptor) before anything is sent: a queue name is global, and
// another user may have created it first.
func dialMQ(u *url.URL, trusted owners) (Conn, int, error) {
	name := u.Path
	if u.Host != "" {
		name = "/" + u.Host + u.Path
	}
	if name == "" {
		name = u.Opaque
	}
	if strings.TrimPrefix(name, "/") == "" {
		return nil, 0, fmt.Errorf("mq: %q needs a queue name, e.g. mq:///logagg", u.Redacted())
	}
	q, err := mqueue.Open(name, unix.O_WRONLY, 0, nil)
	if err != nil {
		return nil, 0, err
	}
	if err := trusted.checkFD(q.FD(), "queue "+q.Name(), "queue"); err != nil {
		q.Close()
		return nil, 0, err
	}
	a, err := q.Attr()
	if err != nil {
		q.Close()
		return nil, 0, err
	}
	return &mqConn{q: q}, int(a.MsgSize), nil
}

type mqConn struct{ q *mqueue.Queue }

func (c *mqConn) Write(p []byte) (int, error) {
	if err := c.q.Send(p, 0, -1); err != nil {
		return 0, fmt.Errorf("mq_send %s (%d bytes): %w", c.q.Name(), len(p), err)
	}
	return len(p), nil
}

func (c *mqConn) Close() error { return c.q.Close() }
