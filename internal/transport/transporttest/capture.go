// Package transporttest is the conformance suite every transport runs, and
// the in-memory Submitter it captures records with.
//
// A transport package (or the table test in internal/transport/all) describes
// itself with a Case and calls Run. The suite opens listeners through
// transport.Open, so the transport must be registered (imported) by the test.
package transporttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ipclab/logagg/internal/pipeline"
)

// Rec is one captured output line, decoded.
type Rec struct {
	Raw     []byte `json:"-"`
	Message string `json:"message"`
	Agg     struct {
		RecvNS    int64  `json:"recv_ns"`
		Transport string `json:"transport"`
		Listener  string `json:"listener"`
		Format    string `json:"format"`
		Peer      *struct {
			PID  *int32  `json:"pid"`
			UID  *uint32 `json:"uid"`
			GID  *uint32 `json:"gid"`
			Addr string  `json:"addr"`
			Via  string  `json:"via"`
		} `json:"peer"`
		Flags []string `json:"flags"`
	} `json:"agg"`
}

// HasFlag reports whether the record carries flag name.
func (r *Rec) HasFlag(name string) bool {
	for _, f := range r.Agg.Flags {
		if f == name {
			return true
		}
	}
	return false
}

// Capture is an in-memory pipeline.Submitter that keeps every line it is
// given. It is safe for concurrent use. Block makes Submit wait (as a full
// queue does) until Unblock, to exercise backpressure.
type Capture struct {
	mu      sync.Mutex
	lines   [][]byte
	errs    []string
	gate    chan struct{} // non-nil while blocked
	waiting atomic.Int32
	batches atomic.Int64
}

// NewCapture returns an empty, unblocked Capture.
func NewCapture() *Capture { return &Capture{} }

// NewBatch implements pipeline.Submitter.
func (c *Capture) NewBatch() *pipeline.Batch { return &pipeline.Batch{} }

// Submit implements pipeline.Submitter. It checks the batch is well formed
// (Records matches the lines, every line is JSON, Origin is set) and
// records any violation, reported by Errors.
func (c *Capture) Submit(ctx context.Context, b *pipeline.Batch) error {
	c.mu.Lock()
	gate := c.gate
	c.mu.Unlock()
	if gate != nil {
		c.waiting.Add(1)
		select {
		case <-gate:
			c.waiting.Add(-1)
		case <-ctx.Done():
			c.waiting.Add(-1)
			return ctx.Err()
		}
	}
	c.batches.Add(1)
	var lines [][]byte
	for rest := b.Buf; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			c.fail("batch does not end with a newline: %q", rest)
			break
		}
		line := bytes.Clone(rest[:i])
		if !json.Valid(line) {
			c.fail("invalid JSON line: %q", line)
		}
		lines = append(lines, line)
		rest = rest[i+1:]
	}
	if len(lines) != b.Records {
		c.fail("batch says %d records, holds %d lines", b.Records, len(lines))
	}
	if b.Origin == nil {
		c.fail("batch without Origin")
	}
	c.mu.Lock()
	c.lines = append(c.lines, lines...)
	c.mu.Unlock()
	// Kept is written, as far as the source can tell: its completions run
	// as the pipeline's writer would run them after the write.
	for _, d := range b.Done {
		d.To.Written(d.Mark)
	}
	return nil
}

func (c *Capture) fail(format string, args ...any) {
	c.mu.Lock()
	if len(c.errs) < 10 {
		c.errs = append(c.errs, fmt.Sprintf(format, args...))
	}
	c.mu.Unlock()
}

// Errors lists malformed batches seen so far.
func (c *Capture) Errors() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.errs...)
}

// Block makes later Submit calls wait until Unblock.
func (c *Capture) Block() {
	c.mu.Lock()
	if c.gate == nil {
		c.gate = make(chan struct{})
	}
	c.mu.Unlock()
}

// Unblock releases waiting and later Submit calls.
func (c *Capture) Unblock() {
	c.mu.Lock()
	if c.gate != nil {
		close(c.gate)
		c.gate = nil
	}
	c.mu.Unlock()
}

// Waiting is the number of Submit calls blocked right now.
func (c *Capture) Waiting() int { return int(c.waiting.Load()) }

// Batches is the number of batches accepted.
func (c *Capture) Batches() int64 { return c.batches.Load() }

// Len is the number of records captured.
func (c *Capture) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.lines)
}

// Records decodes every captured line.
func (c *Capture) Records() ([]Rec, error) {
	c.mu.Lock()
	lines := c.lines
	c.mu.Unlock()
	out := make([]Rec, len(lines))
	for i, l := range lines {
		if err := json.Unmarshal(l, &out[i]); err != nil {
			return nil, fmt.Errorf("line %d %q: %w", i, l, err)
		}
		out[i].Raw = l
	}
	return out, nil
}
