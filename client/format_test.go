package client

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The cached formatter writes exactly what time.RFC3339Nano writes, for
// whole seconds, trailing zeros, second and zone changes.
func TestTimestampCacheMatchesRFC3339Nano(t *testing.T) {
	east := time.FixedZone("east", 5*3600+30*60)
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		ny = time.FixedZone("ny", -5*3600)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	var c timestampCache
	base := time.Date(2026, 3, 8, 6, 59, 58, 0, time.UTC) // a DST change in New York at 07:00 UTC
	for i := 0; i < 100000; i++ {
		ns := []int64{0, 100_000_000, 120_000_000, 123_456_789, 1, 999_999_999, rng.Int64N(1e9)}[rng.IntN(7)]
		ts := base.Add(time.Duration(rng.Int64N(5))*time.Second + time.Duration(ns))
		switch rng.IntN(3) {
		case 1:
			ts = ts.In(east)
		case 2:
			ts = ts.In(ny)
		}
		got := string(c.appendRFC3339Nano(nil, ts))
		if want := ts.Format(time.RFC3339Nano); got != want {
			t.Fatalf("%v: got %q, want %q", ts, got, want)
		}
	}
}
