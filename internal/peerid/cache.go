package peerid

import (
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/record"
)

// UDPCache remembers, per local and source address, which socket sent
// datagrams and which process holds it, so a UDP listener pays for one
// /proc walk per sender per TTL instead of one per datagram.
//
// # True or absent
//
// The kernel does not say which socket sent a datagram, only which socket
// is bound to its source address now, and a source port can change hands
// at any moment (a sender closes, another process binds the port). So a
// cached identity is given to a datagram only after a sock_diag request
// made after the datagram was read (Lookup's readAt) found the same socket
// (inode and cookie) still bound to the address: the socket was bound from
// the lookup until then, so it sent every datagram that arrived meanwhile.
// That costs one request (~5-10 µs here, on a netlink socket the cache
// keeps) per batch of datagrams per loopback sender, not per datagram, and
// it is charged to the lookups' CPU share: past 100 ms in a second, batches
// go without identity until the next second.
//
// When the confirmation finds another socket (the port changed hands) or
// none (the sender closed), the datagrams of that batch get no identity:
// either owner may have sent them. The new socket is looked up for the
// batches after. What stays a snapshot is the first datagram of a source
// the cache has not seen (or forgot): it gets the owner of the socket bound
// when it is looked up, microseconds after it arrived. Only a sender that
// closes and a process of another user that binds the same port within
// that window could be confused, and the confirmation of the next batch
// ends it.
//
// Failed lookups (a remote sender, over budget) are remembered as well, so
// a flood from an unknown source cannot make every datagram walk /proc;
// they name nobody, so they need no confirmation. Entries expire after the
// TTL (the /proc walk is redone: a socket can be passed to another
// process) and are forgotten after a TTL unused. It is safe for concurrent
// use; the zero value is not usable, call NewUDPCache, and Close it.
type UDPCache struct {
	ttl    time.Duration
	budget Budget
	max    int
	now    func() time.Time // for tests of expiry; time.Now otherwise

	mu        sync.Mutex
	entries   map[udpKey]udpEntry
	lastSweep time.Time

	diag *keptDiag // confirmations' own socket: they never wait for a TCP lookup's
}

type udpKey struct{ local, remote netip.AddrPort }

type udpEntry struct {
	peer record.Peer
	// sock is the socket peer was found for; zero for an entry that names
	// nobody (lookup failed).
	sock sockID
	// expires is when the process holding sock is looked for again.
	expires time.Time
	// confirmed is the last time sock was seen bound to the address.
	confirmed time.Time
	used      time.Time
}

// sockID identifies a socket for as long as the kernel runs: inode numbers
// are reused, cookies are not.
type sockID struct{ inode, cookie uint64 }

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
	return &UDPCache{ttl: ttl, budget: b, max: maxEntries, now: time.Now, entries: map[udpKey]udpEntry{}, diag: newKeptDiag()}
}

// Lookup returns the sender of datagrams from remote to local that were
// read at readAt or before. The returned Peer always carries Addr;
// HasCreds tells whether the process is known to have sent them. A sender
// already confirmed after readAt costs a map lookup and no allocation
// (every datagram of a batch after its first); otherwise the socket is
// confirmed (one sock_diag request) or looked up, in the caller's
// goroutine.
func (c *UDPCache) Lookup(local, remote netip.AddrPort, readAt time.Time) record.Peer {
	k := udpKey{local, remote}
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries[k]
	if ok && now.Before(e.expires) && (e.sock == (sockID{}) || !e.confirmed.Before(readAt)) {
		if now.Sub(e.used) > time.Second {
			e.used = now
			c.entries[k] = e
		}
		c.mu.Unlock()
		return e.peer
	}
	c.mu.Unlock()

	if !ok || e.sock == (sockID{}) {
		// A sender not seen before, or whose lookup failed: the snapshot
		// (see the type's doc).
		p, si, _ := c.lookup(local, remote, nil)
		c.store(k, p, si, now)
		return p
	}
	addrOnly := record.Peer{Addr: e.peer.Addr}
	// Confirmations share the lookups' CPU budget (spend): past it a batch
	// is recorded without identity rather than unconfirmed.
	start, okSpend := spend()
	if !okSpend {
		return addrOnly
	}
	si, err := c.confirm(local, remote)
	charge(start)
	switch {
	case err != nil:
		// Nothing bound there any more: the datagrams came from the
		// socket we knew, or from one that came and went since.
		c.forget(k)
		return addrOnly
	case idOf(si) != e.sock:
		// The port changed hands: the batch may hold datagrams of both
		// owners. Know the new one for the next batches.
		p, si, _ := c.lookup(local, remote, &si)
		c.store(k, p, si, c.now())
		return addrOnly
	case now.Before(e.expires):
		e.confirmed, e.used = c.now(), now
		c.mu.Lock()
		c.entries[k] = e
		c.mu.Unlock()
		return e.peer
	default:
		// The same socket, but time to look for its process again (it may
		// have been passed on).
		p, found, _ := c.lookup(local, remote, &si)
		c.store(k, p, found, c.now())
		if idOf(found) != e.sock {
			return addrOnly // not found again (over budget, exited)
		}
		return p
	}
}

// lookup finds the socket bound to remote (unless known: si) and its
// process, within the lookups' CPU share. It returns the socket found, or
// a zero sockInfo.
func (c *UDPCache) lookup(local, remote netip.AddrPort, known *sockInfo) (record.Peer, sockInfo, error) {
	peer := record.Peer{Addr: netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port()).String()}
	start, ok := spend()
	if !ok {
		return peer, sockInfo{}, ErrRate
	}
	defer charge(start)
	var si sockInfo
	if known != nil {
		si = *known
	} else {
		var err error
		if si, err = c.confirm(local, remote); err != nil {
			return peer, sockInfo{}, err
		}
	}
	p, err := ownerOf(si, peer, "udp", c.budget)
	if err != nil {
		return p, sockInfo{}, err
	}
	return p, si, nil
}

// confirm asks which socket is bound to remote now, on the cache's kept
// socket.
func (c *UDPCache) confirm(local, remote netip.AddrPort) (sockInfo, error) {
	// udp_diag's "swapped" convention, as in lookupInet.
	return c.diag.lookup(unix.IPPROTO_UDP, local, remote)
}

func idOf(si sockInfo) sockID { return sockID{si.inode, si.cookie} }

// store remembers what lookup found (an entry naming nobody if si is zero).
func (c *UDPCache) store(k udpKey, p record.Peer, si sockInfo, now time.Time) {
	e := udpEntry{peer: p, expires: now.Add(c.ttl), used: now}
	if p.HasCreds {
		e.sock, e.confirmed = idOf(si), c.now()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.lastSweep) >= c.ttl {
		// Bounded by time: senders unused for a TTL are forgotten.
		c.lastSweep = now
		for k, e := range c.entries {
			if now.Sub(e.used) >= c.ttl {
				delete(c.entries, k)
			}
		}
	}
	if len(c.entries) >= c.max {
		clear(c.entries)
	}
	c.entries[k] = e
}

func (c *UDPCache) forget(k udpKey) {
	c.mu.Lock()
	delete(c.entries, k)
	c.mu.Unlock()
}

// Len is the number of cached senders, for metrics and tests.
func (c *UDPCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// Close releases the kept netlink socket. The cache stays usable (a later
// Lookup opens another).
func (c *UDPCache) Close() { c.diag.close() }
