package bufpool

import (
	"sync"
	"testing"
)

// boundedWithCounts is a Bounded whose reports are summed, to check that
// they agree with what it holds.
func boundedWithCounts(limit int64) (*Bounded, func() (lent, kept int64)) {
	var mu sync.Mutex
	var lent, kept int64
	p := NewBounded(limit, func(l, k int64) {
		mu.Lock()
		lent, kept = lent+l, kept+k
		mu.Unlock()
	})
	return p, func() (int64, int64) {
		mu.Lock()
		defer mu.Unlock()
		return lent, kept
	}
}

func TestBoundedReusesWhatItKeeps(t *testing.T) {
	p, counts := boundedWithCounts(1 << 20)
	a := p.Get(100 << 10)
	if cap(a) != 128<<10 {
		t.Fatalf("Get(100 KiB) has capacity %d, want 128 KiB", cap(a))
	}
	if lent, kept := counts(); lent != 128<<10 || kept != 0 {
		t.Fatalf("one lent: reported %d lent, %d kept", lent, kept)
	}
	a = append(a, 'x')
	p.Put(a)
	if lent, kept := counts(); lent != 0 || kept != 128<<10 {
		t.Fatalf("given back: reported %d lent, %d kept; want 0 and 128 KiB", lent, kept)
	}
	b := p.Get(65 << 10)
	if &b[:1][0] != &a[:1][0] || len(b) != 0 {
		t.Errorf("Get of the same size class did not reuse the kept buffer empty")
	}
	if lent, kept := counts(); lent != 128<<10 || kept != 0 {
		t.Errorf("reused: reported %d lent, %d kept", lent, kept)
	}
}

// What is lent and kept stays within the limit: a buffer given back is
// kept only in the room the lent ones leave, and a new one lets kept ones
// go, so free buffers of one size never stand beside new ones of another
// past the limit.
func TestBoundedKeepsOnlyTheRoomLentBuffersLeave(t *testing.T) {
	const limit = 1 << 20
	p, counts := boundedWithCounts(limit)
	var big [][]byte
	for range 4 {
		big = append(big, p.Get(256<<10))
	}
	for _, b := range big {
		p.Put(b)
	}
	if lent, kept := counts(); lent != 0 || kept != limit {
		t.Fatalf("four 256 KiB given back: %d lent, %d kept; want 0, 1 MiB", lent, kept)
	}
	// Buffers of another size: each new one lets a kept one go.
	var small [][]byte
	for k := 1; k <= 8; k++ {
		small = append(small, p.Get(64<<10))
		lent, kept := counts()
		if lent+kept > limit {
			t.Fatalf("%d × 64 KiB lent beside the kept: %d lent + %d kept > the limit", k, lent, kept)
		}
	}
	// Past the limit, what is lent is still lent (its callers bound it),
	// and nothing is kept.
	for range 16 {
		small = append(small, p.Get(64<<10))
	}
	if lent, kept := counts(); lent != 24*64<<10 || kept != 0 {
		t.Fatalf("24 × 64 KiB lent: %d lent, %d kept; want 1.5 MiB and 0", lent, kept)
	}
	for _, b := range small {
		p.Put(b)
	}
	if lent, kept := counts(); lent != 0 || kept != limit {
		t.Errorf("all given back: %d lent, %d kept; want 0 and the limit kept", lent, kept)
	}
	if lent, kept := p.lent, p.kept; lent != 0 || kept != limit {
		t.Errorf("the pool holds %d lent, %d kept; its reports say 0 and %d", lent, kept, limit)
	}
}

func TestBoundedIgnoresNil(t *testing.T) {
	p, counts := boundedWithCounts(1 << 20)
	p.Put(nil)
	if lent, kept := counts(); lent != 0 || kept != 0 {
		t.Errorf("Put(nil) reported %d lent, %d kept", lent, kept)
	}
}

func TestBoundedConcurrent(t *testing.T) {
	const limit = 4 << 20
	p, counts := boundedWithCounts(limit)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for k := range 2000 {
				b := p.Get(1 << (10 + (g+k)%10))
				p.Put(append(b, 1))
			}
		})
	}
	wg.Wait()
	if lent, kept := counts(); lent != 0 || kept > limit || kept != p.kept {
		t.Errorf("after: reported %d lent, %d kept (the pool: %d kept), limit %d", lent, kept, p.kept, limit)
	}
}

func BenchmarkBoundedGetPut(b *testing.B) {
	p := NewBounded(16<<20, nil)
	for b.Loop() {
		p.Put(p.Get(128 << 10))
	}
}
