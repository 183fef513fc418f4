package main

import (
	"testing"
	"time"
)

// wallClock must stay within a few microseconds of time.Now, move forward,
// and take a fresh anchor once reanchorEvery has passed.
func TestWallClockFollowsTimeNow(t *testing.T) {
	var c wallClock
	prev := c.now()
	first := c.anchor
	// Not a wait: readings are checked back to back for three re-anchor
	// periods.
	deadline := time.Now().Add(3 * reanchorEvery)
	for time.Now().Before(deadline) {
		before := time.Now()
		got := c.now()
		after := time.Now()
		// Wall readings: the anchor's wall time plus monotonic elapsed time.
		const slack = 50 * time.Microsecond
		if got.UnixNano() < before.UnixNano()-int64(slack) || got.UnixNano() > after.UnixNano()+int64(slack) {
			t.Fatalf("wallClock %v outside [%v, %v]", got, before, after)
		}
		if got.Before(prev) {
			t.Fatalf("wallClock went back: %v after %v", got, prev)
		}
		prev = got
	}
	if c.anchor.Equal(first) {
		t.Fatalf("no new anchor after %v", 3*reanchorEvery)
	}
}
