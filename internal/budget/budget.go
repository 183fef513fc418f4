// Package budget counts bytes held against a limit that callers may wait
// on: the batch queues and the connections' share of the daemon's memory
// budget (docs/memory.md). A Gate is safe for concurrent use.
package budget

import (
	"sync"
	"sync/atomic"
)

// Gate is a number of bytes held against a limit. Take waits for room;
// Give makes room. When nothing is held, any one request fits, however big,
// so a single item larger than the limit is never stuck.
type Gate struct {
	limit int64
	held  atomic.Int64
	// room is closed, and replaced, when bytes are given back while
	// someone waits.
	mu      sync.Mutex
	room    chan struct{}
	waiting atomic.Int32
}

// NewGate returns a gate of limit bytes (at least 1).
func NewGate(limit int64) *Gate { return &Gate{limit: max(limit, 1), room: make(chan struct{})} }

// Limit is the gate's limit in bytes.
func (g *Gate) Limit() int64 { return g.limit }

// Held is the bytes held.
func (g *Gate) Held() int64 { return g.held.Load() }

// Fits reports whether n bytes would fit now.
func (g *Gate) Fits(n int64) bool {
	cur := g.held.Load()
	return cur == 0 || cur+n <= g.limit
}

// TryTake takes n bytes if they fit, and reports whether it did.
func (g *Gate) TryTake(n int64) bool {
	for {
		cur := g.held.Load()
		if cur > 0 && cur+n > g.limit {
			return false
		}
		if g.held.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// Take takes n bytes, waiting while they do not fit; it reports false,
// having taken nothing, once done is closed. waited, if not nil, is called
// once when Take has to wait.
func (g *Gate) Take(done <-chan struct{}, n int64, waited func()) bool {
	for {
		if g.TryTake(n) {
			return true
		}
		g.mu.Lock()
		room := g.room
		g.waiting.Add(1)
		g.mu.Unlock()
		// Tried again once registered: Give may have made room before
		// it could see a waiter.
		if g.TryTake(n) {
			g.waiting.Add(-1)
			return true
		}
		if waited != nil {
			waited()
			waited = nil
		}
		select {
		case <-room:
			g.waiting.Add(-1)
		case <-done:
			g.waiting.Add(-1)
			return false
		}
	}
}

// Charge takes n bytes whether they fit or not: for what is held already
// and must go on being held (a file followed before a restart). Give
// gives them back as any other.
func (g *Gate) Charge(n int64) { g.held.Add(n) }

// Give gives back n bytes taken, waking whoever waits for room.
func (g *Gate) Give(n int64) {
	g.held.Add(-n)
	if g.waiting.Load() > 0 {
		g.mu.Lock()
		close(g.room)
		g.room = make(chan struct{})
		g.mu.Unlock()
	}
}
