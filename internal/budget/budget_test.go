package budget

import (
	"sync"
	"testing"
	"time"
)

func TestGateBoundsAndWakes(t *testing.T) {
	g := NewGate(100)
	if !g.TryTake(60) || g.TryTake(60) {
		t.Fatal("60 then 60 of 100: want the first taken, the second refused")
	}
	waited := false
	got := make(chan bool)
	go func() { got <- g.Take(nil, 60, func() { waited = true }) }()
	select {
	case <-got:
		t.Fatal("Take returned while the gate was full")
	case <-time.After(20 * time.Millisecond):
	}
	g.Give(60)
	if !<-got || !waited {
		t.Fatal("Take did not take the room Give made, or did not say it waited")
	}
	if g.Held() != 60 {
		t.Fatalf("held %d, want 60", g.Held())
	}
}

func TestGateLetsOneOversizedRequestThrough(t *testing.T) {
	g := NewGate(10)
	if !g.TryTake(1000) {
		t.Fatal("an empty gate refused a request over its limit")
	}
	if g.TryTake(1) {
		t.Fatal("a gate over its limit took more")
	}
}

func TestGateTakeGivesUpWhenDone(t *testing.T) {
	g := NewGate(10)
	g.TryTake(10)
	done := make(chan struct{})
	close(done)
	if g.Take(done, 5, nil) {
		t.Fatal("Take succeeded on a full gate after done")
	}
	if g.Held() != 10 {
		t.Fatalf("held %d after a refused Take, want 10", g.Held())
	}
}

func TestGateConcurrentNeverExceeds(t *testing.T) {
	g := NewGate(1000)
	var wg sync.WaitGroup
	var mu sync.Mutex
	peak := int64(0)
	for range 8 {
		wg.Go(func() {
			for range 2000 {
				g.Take(nil, 100, nil)
				mu.Lock()
				peak = max(peak, g.Held())
				mu.Unlock()
				g.Give(100)
			}
		})
	}
	wg.Wait()
	if peak > 1000 || g.Held() != 0 {
		t.Fatalf("peak %d (limit 1000), held at the end %d", peak, g.Held())
	}
}
