// Package otlptest is a minimal OTLP logs client for tests: it makes the
// conformance suite's "one Write is one record" sender out of the OTLP
// receivers, and sends requests nobody's SDK would send (bad input).
//
// A Conn holds one connection (gRPC or HTTP/1.1, TCP or a unix socket)
// from Dial on. Each Write is one LogRecord whose body is the line
// written, its newline removed. Records are sent in requests of up to
// Batch records: within the Write of every Batch-th record of the
// connection, 10 ms after the last Write, or by Close. A request the
// receiver refuses for now (RESOURCE_EXHAUSTED, UNAVAILABLE, 429, 503) is
// sent again, as an SDK does, until it is accepted; the Write waiting for
// it is the sender held back.
package otlptest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ipclab/logagg/internal/otlpwire"
)

// Batch is the most records a Conn puts in one request.
const Batch = 100

// RetryFor is how long a Conn sends a refused request again before it
// gives up with the receiver's error.
const RetryFor = 60 * time.Second

// Conn is one client connection; see the package doc.
type Conn struct {
	mu      sync.Mutex
	recs    [][]byte
	total   int // records written on the connection
	timer   *time.Timer
	err     error
	closed  bool
	send    func(req []byte) (retry bool, err error)
	closeFn func() error
	local   net.Addr
}

// Dial connects to the receiver whose listener URL is raw (otlp://,
// otlp+unix://, otlphttp://, otlphttp+unix://) and waits until the
// connection is up (for gRPC: its HTTP/2 handshake done).
func Dial(raw string) (*Conn, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	network, addr := "tcp", u.Host
	if u.Scheme == "otlp+unix" || u.Scheme == "otlphttp+unix" {
		network, addr = "unix", u.Path
	}
	c := &Conn{}
	switch u.Scheme {
	case "otlp", "otlp+unix":
		var local net.Addr
		var lmu sync.Mutex
		cc, err := grpc.NewClient("passthrough:///"+addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
				nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err == nil {
					lmu.Lock()
					local = nc.LocalAddr()
					lmu.Unlock()
				}
				return nc, err
			}),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(otlpwire.Codec{})))
		if err != nil {
			return nil, err
		}
		cc.Connect()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
			if !cc.WaitForStateChange(ctx, s) {
				cc.Close()
				return nil, fmt.Errorf("otlptest: %s not ready: %s", raw, s)
			}
		}
		lmu.Lock()
		c.local = local
		lmu.Unlock()
		c.closeFn = cc.Close
		c.send = func(req []byte) (bool, error) {
			var resp otlpwire.Raw
			ctx, cancel := context.WithTimeout(context.Background(), RetryFor)
			defer cancel()
			err := cc.Invoke(ctx, otlpwire.ExportPath, &otlpwire.Raw{B: req}, &resp)
			switch status.Code(err) {
			case codes.OK:
				return false, nil
			case codes.ResourceExhausted, codes.Unavailable:
				return true, err
			}
			return false, err
		}
	default:
		nc, err := net.Dial(network, addr)
		if err != nil {
			return nil, err
		}
		c.local = nc.LocalAddr()
		br := bufio.NewReader(nc)
		c.closeFn = nc.Close
		c.send = func(req []byte) (bool, error) {
			var hdr bytes.Buffer
			fmt.Fprintf(&hdr, "POST %s HTTP/1.1\r\nHost: logagg\r\nContent-Type: application/x-protobuf\r\nContent-Length: %d\r\n\r\n", otlpwire.HTTPPath, len(req))
			if _, err := nc.Write(append(hdr.Bytes(), req...)); err != nil {
				return false, err
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return false, err
			}
			io.Copy(io.Discard, resp.Body) //nolint:errcheck
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				return false, nil
			case http.StatusTooManyRequests, http.StatusServiceUnavailable:
				return true, errors.New(resp.Status)
			}
			return false, errors.New(resp.Status)
		}
	}
	return c, nil
}

// LocalAddr is the client's end of the connection.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// Write adds one record (p without its trailing newline).
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	c.recs = append(c.recs, bytes.TrimSuffix(bytes.Clone(p), []byte("\n")))
	c.total++
	// Full batches end at every Batch-th record of the connection, even
	// after the timer sent a partial one, so that a sender that wrote a
	// multiple of Batch records had them all sent when its Write returned.
	if c.total%Batch == 0 {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if c.timer == nil {
		c.timer = time.AfterFunc(10*time.Millisecond, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.timer = nil
			if !c.closed {
				c.flushLocked() //nolint:errcheck // kept in c.err
			}
		})
	} else {
		c.timer.Reset(10 * time.Millisecond)
	}
	return len(p), nil
}

// Close sends what is left and closes the connection.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.err
	}
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	err := c.flushLocked()
	c.closed = true
	return errors.Join(err, c.closeFn())
}

func (c *Conn) flushLocked() error {
	if c.err != nil || len(c.recs) == 0 {
		return c.err
	}
	req := Request(c.recs...)
	c.recs = c.recs[:0]
	// Retries are bounded: a receiver that went away for good must not
	// hold a test's cleanup forever.
	giveUp := time.Now().Add(RetryFor)
	for {
		retry, err := c.send(req)
		if err == nil {
			return nil
		}
		if !retry || time.Now().After(giveUp) {
			c.err = err
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Request is an ExportLogsServiceRequest of one resource and scope with
// one LogRecord per body, each a string.
func Request(bodies ...[]byte) []byte {
	var recs []byte
	for _, b := range bodies {
		var av []byte
		av = protowire.AppendTag(av, otlpwire.AnyString, protowire.BytesType)
		av = protowire.AppendBytes(av, b)
		var lr []byte
		lr = protowire.AppendTag(lr, otlpwire.LogBody, protowire.BytesType)
		lr = protowire.AppendBytes(lr, av)
		recs = protowire.AppendTag(recs, otlpwire.ScopeLogsLogRecords, protowire.BytesType)
		recs = protowire.AppendBytes(recs, lr)
	}
	var rl []byte
	rl = protowire.AppendTag(rl, otlpwire.ResourceLogsScopeLogs, protowire.BytesType)
	rl = protowire.AppendBytes(rl, recs)
	var req []byte
	req = protowire.AppendTag(req, otlpwire.RequestResourceLogs, protowire.BytesType)
	return protowire.AppendBytes(req, rl)
}
