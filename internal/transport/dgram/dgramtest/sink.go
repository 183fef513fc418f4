// Package dgramtest has test helpers for the datagram transports: a
// Submitter that captures records and can be made to block, and helpers to
// read the captured JSON lines.
package dgramtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/ipclab/logagg/internal/testenv"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/pipeline"
)

// Sink is a pipeline.Submitter that keeps every line it is given. Block
// makes Submit wait (like a full queue) until Release. Safe for concurrent
// use.
type Sink struct {
	mu      sync.Mutex
	lines   [][]byte
	batches int
	gate    chan struct{} // nil: open
	waiting chan struct{} // receives once per Submit that waits at the gate
}

// NewSink returns an open sink.
func NewSink() *Sink { return &Sink{waiting: make(chan struct{}, 1024)} }

// NewBatch implements pipeline.Submitter.
func (s *Sink) NewBatch() *pipeline.Batch { return &pipeline.Batch{} }

// Submit implements pipeline.Submitter.
func (s *Sink) Submit(ctx context.Context, b *pipeline.Batch) error {
	s.mu.Lock()
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		select {
		case s.waiting <- struct{}{}:
		default:
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches++
	buf := b.Buf
	for len(buf) > 0 {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			i = len(buf) - 1
		}
		s.lines = append(s.lines, bytes.Clone(buf[:i+1]))
		buf = buf[i+1:]
	}
	return nil
}

// Block makes later Submits wait until Release.
func (s *Sink) Block() {
	s.mu.Lock()
	s.gate = make(chan struct{})
	s.mu.Unlock()
}

// Release lets waiting and later Submits through.
func (s *Sink) Release() {
	s.mu.Lock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
	s.mu.Unlock()
}

// Waiting receives a value each time a Submit starts waiting at the gate.
func (s *Sink) Waiting() <-chan struct{} { return s.waiting }

// Len is the number of lines received.
func (s *Sink) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lines)
}

// Batches is the number of batches received.
func (s *Sink) Batches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.batches
}

// Records decodes every line received so far.
func (s *Sink) Records(t testing.TB) []Record {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Record, 0, len(s.lines))
	for _, l := range s.lines {
		var r Record
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatalf("output line is not JSON: %v: %q", err, l)
		}
		out = append(out, r)
	}
	return out
}

// WaitLen polls until at least n lines arrived or the timeout passes.
func (s *Sink) WaitLen(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	testenv.Poll(t, timeout, fmt.Sprintf("%d lines", n), func() (int, bool) { return s.Len(), s.Len() >= n })
}

// Record is the part of an output line the tests look at.
type Record struct {
	Message string `json:"message"`
	Syslog  struct {
		Hostname string `json:"hostname"`
		Appname  string `json:"appname"`
		Procid   string `json:"procid"`
	} `json:"syslog"`
	Agg struct {
		RecvNS    int64    `json:"recv_ns"`
		Transport string   `json:"transport"`
		Listener  string   `json:"listener"`
		Format    string   `json:"format"`
		Flags     []string `json:"flags"`
		Peer      *struct {
			PID  *int32  `json:"pid"`
			UID  *uint32 `json:"uid"`
			GID  *uint32 `json:"gid"`
			Addr string  `json:"addr"`
			Via  string  `json:"via"`
		} `json:"peer"`
	} `json:"agg"`
}

// Leaks snapshots open fds and goroutines; Check fails if either grew.
type Leaks struct{ fds, goroutines int }

// Snapshot records the current counts.
func Snapshot(t testing.TB) Leaks {
	t.Helper()
	return Leaks{fds: countFDs(t), goroutines: runtime.NumGoroutine()}
}

// Check polls (goroutines take a moment to exit) until the counts are back
// to the snapshot's, failing after a deadline.
func (l Leaks) Check(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		fds, g := countFDs(t), runtime.NumGoroutine()
		if fds <= l.fds && g <= l.goroutines {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("leak: fds %d -> %d, goroutines %d -> %d\n%s", l.fds, fds, l.goroutines, g, buf)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func countFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("count fds: %v", err)
	}
	return len(ents)
}
