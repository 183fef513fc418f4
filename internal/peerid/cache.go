package peerid

import (
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/record"
)

// UDPCache remembers, per local and source address, who sent datagrams, so
// a UDP listener pays for one lookup per sender per TTL instead of one per
// datagram. Failed lookups (a remote sender, over budget) are remembered as
// well, so a flood from an unknown source cannot make every datagram walk
// /proc. It is safe for concurrent use; the zero value is not usable, call
// NewUDPCache.
type UDPCache struct {
	ttl    time.Duration
	budget Budget
	max    int
	now    func() time.Time // for tests of expiry; time.Now otherwise

	mu      sync.Mutex
	entries map[udpKey]udpEntry
}

type udpKey struct{ local, remote netip.AddrPort }

type udpEntry struct {
	peer    record.Peer
	expires time.Time
}

// NewUDPCache returns a cache whose entries live ttl (5 s if 0) and whose
// lookups are bounded by b. At most maxEntries senders are kept (4096 if
// 0); when full, the cache is emptied, which costs one lookup per active
// sender, not a failure.
func NewUDPCache(ttl time.Duration, b Budget, maxEntries int) *UDPCache {
	if ttl <= 0 {
		ttl = 5 * time.Second
	}
	if maxEntries <= 0 {
		maxEntries = 4096
	}
	return &UDPCache{ttl: ttl, budget: b, max: maxEntries, now: time.Now, entries: map[udpKey]udpEntry{}}
}

// Lookup returns the sender of datagrams from remote to local. On a hit it
// costs a map lookup and no allocation. The returned Peer always carries
// Addr; HasCreds tells whether the process was found. The lookup itself runs
// in the caller's goroutine on a miss; concurrent misses for the same key
// may both look up (harmless, rare).
func (c *UDPCache) Lookup(local, remote netip.AddrPort) record.Peer {
	k := udpKey{local, remote}
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries[k]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.peer
	}
	p, _ := lookupInet(unix.IPPROTO_UDP, local, remote, c.budget)
	c.mu.Lock()
	if len(c.entries) >= c.max {
		clear(c.entries)
	}
	c.entries[k] = udpEntry{peer: p, expires: now.Add(c.ttl)}
	c.mu.Unlock()
	return p
}

// Len is the number of cached senders, for metrics and tests.
func (c *UDPCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
