package mq

import (
	"io"
	"net/url"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/mqueue"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

// queueConn adapts a queue to the suite's io.WriteCloser: one Write, one message.
type queueConn struct{ q *mqueue.Queue }

func (c queueConn) Write(p []byte) (int, error) {
	if err := c.q.Send(p, 0, -1); err != nil {
		return 0, err
	}
	return len(p), nil
}
func (c queueConn) Close() error { return c.q.Close() }

func TestConformance(t *testing.T) {
	skipWithoutMqueue(t)
	transporttest.Run(t, transporttest.Case{
		Name:      "mq",
		Transport: "mq",
		NewURL: func(t testing.TB) string {
			name := queueName()
			t.Cleanup(func() { mqueue.Unlink(name) })
			// The suite raises --max-record to 64 KiB, which the default
			// fs.mqueue.msgsize_max (8 KiB) refuses at start-up; sizing the
			// queue explicitly is the documented way to accept the smaller
			// per-listener limit.
			return "mq://" + name + "?msgsize=8192"
		},
		Dial: func(raw string) (io.WriteCloser, error) {
			u, err := url.Parse(raw)
			if err != nil {
				return nil, err
			}
			name, err := Name(u)
			if err != nil {
				return nil, err
			}
			q, err := mqueue.Open(name, unix.O_WRONLY, 0, nil)
			if err != nil {
				return nil, err
			}
			return queueConn{q}, nil
		},
		Stream: true, // senders block when the queue is full: backpressure, nothing lost
	})
}
