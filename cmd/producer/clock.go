package main

import "time"

// reanchorEvery bounds how long wallClock follows the monotonic clock alone.
const reanchorEvery = 10 * time.Millisecond

// wallClock gives the wall time of each record from one clock read.
// time.Now reads two clocks (realtime and monotonic, two vDSO calls: ~45 ns
// of the ~240 ns a flat-out shm record cost the producer here), whereas
// time.Since reads only the monotonic one. wallClock adds that elapsed time
// to a wall-clock anchor, and takes a fresh anchor with time.Now every
// reanchorEvery, so a stepped or slewed wall clock shows in the records
// within 10 ms; in between the two clocks differ by at most the slew rate
// (500 ppm, so 5 µs over 10 ms). The times it returns carry a monotonic
// reading, so comparisons such as the end of --duration stay monotonic.
type wallClock struct {
	anchor time.Time
}

func (c *wallClock) now() time.Time {
	if c.anchor.IsZero() {
		c.anchor = time.Now()
		return c.anchor
	}
	d := time.Since(c.anchor)
	if d >= reanchorEvery || d < 0 {
		c.anchor = time.Now()
		return c.anchor
	}
	return c.anchor.Add(d)
}
