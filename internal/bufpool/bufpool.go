// Package bufpool lends byte buffers in power-of-two sizes, so that what
// holds incomplete records over and over (a stream connection's partial
// frame, a file's record being put together) reuses memory instead of
// leaving it to the collector: a record that grows piece by piece would
// otherwise leave each smaller buffer behind as garbage, and under a
// memory budget the garbage is what the peak is made of.
package bufpool

import (
	"math/bits"
	"sync"
)

// pools[i] holds buffers of capacity 1<<i (up to 8 MiB).
var pools [24]sync.Pool

// Size is the capacity Get returns for n bytes: the next power of two.
func Size(n int) int { return 1 << bits.Len(uint(n-1)) }

// Get returns an empty buffer of capacity at least n: Size(n), pooled
// when one is free.
func Get(n int) []byte {
	i := bits.Len(uint(n - 1))
	if i < len(pools) {
		if b, ok := pools[i].Get().(*[]byte); ok {
			return (*b)[:0]
		}
	}
	return make([]byte, 0, n)
}

// Put gives b back for another Get; its owner must not use it again.
// Buffers of other capacities than Get's (and nil) are left to the
// collector.
func Put(b []byte) {
	if i := bits.Len(uint(cap(b) - 1)); cap(b) > 0 && i < len(pools) && cap(b) == 1<<i {
		b = b[:0]
		pools[i].Put(&b)
	}
}
