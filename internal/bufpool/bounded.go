package bufpool

import (
	"math/bits"
	"sync"
)

// Bounded lends buffers of the same power-of-two sizes as Get, and keeps
// those given back for the next Get of their size only in the room that
// the buffers lent leave of its limit: what it lends and keeps together
// stays within the limit, or within what it lends when that alone is more.
// Unlike the shared pools, whose free buffers wait for the collector and
// are counted nowhere, it reports every change in what it lends and keeps.
// Safe for concurrent use.
type Bounded struct {
	limit  int64
	report func(lent, kept int64) // the changes, outside the lock

	mu         sync.Mutex
	lent, kept int64
	free       [len(pools)][][]byte // free[i]: kept buffers of capacity 1<<i
}

// NewBounded returns a pool that keeps at most limit bytes, lent and kept
// together, and calls report (if not nil) with each change in the bytes
// lent and kept.
func NewBounded(limit int64, report func(lent, kept int64)) *Bounded {
	if report == nil {
		report = func(int64, int64) {}
	}
	return &Bounded{limit: limit, report: report}
}

// Get returns an empty buffer of capacity Size(n), a kept one when there
// is one. A new one is made whatever the limit (what is lent is bounded by
// its callers), and kept buffers, the largest first, are let go until what
// is lent and kept fits the limit again.
func (p *Bounded) Get(n int) []byte {
	size := Size(n)
	i := bits.Len(uint(size - 1))
	p.mu.Lock()
	p.lent += int64(size)
	if i < len(p.free) && len(p.free[i]) > 0 {
		b := p.popLocked(i)
		p.mu.Unlock()
		p.report(int64(size), -int64(size))
		return b[:0]
	}
	kept := p.kept
	for j := len(p.free) - 1; j >= 0 && p.lent+p.kept > p.limit && p.kept > 0; j-- {
		for len(p.free[j]) > 0 && p.lent+p.kept > p.limit {
			p.popLocked(j)
		}
	}
	dropped := kept - p.kept
	p.mu.Unlock()
	p.report(int64(size), -dropped)
	return make([]byte, 0, size)
}

// popLocked takes one of the kept buffers of capacity 1<<i (there is one).
func (p *Bounded) popLocked(i int) []byte {
	l := p.free[i]
	b := l[len(l)-1]
	l[len(l)-1] = nil
	p.free[i] = l[:len(l)-1]
	p.kept -= 1 << i
	return b
}

// Put gives back b, which Get returned (nil is ignored); its owner must
// not use it again. It is kept if it fits the limit beside what is lent
// and kept, else left to the collector.
func (p *Bounded) Put(b []byte) {
	c := int64(cap(b))
	if c == 0 {
		return
	}
	i := bits.Len(uint(c - 1))
	p.mu.Lock()
	p.lent -= c
	keep := i < len(p.free) && c == 1<<i && p.lent+p.kept+c <= p.limit
	if keep {
		p.free[i] = append(p.free[i], b[:0])
		p.kept += c
	}
	p.mu.Unlock()
	if keep {
		p.report(-c, c)
		return
	}
	p.report(-c, 0)
}
