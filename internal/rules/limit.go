package rules

import (
	"sync"
	"time"
)

// keyKind is what a rate limit counts records by.
type keyKind uint8

const (
	keyPID keyKind = iota
	keyUID
	keyGID
	keyApp
	keyHost
	keyListener
	keyTransport
	keyField
)

// limitShards split a limiter's table so that event loops evaluating the
// same rule rarely wait for each other.
const limitShards = 16

// limitProbe is how many slots a key may land in: a new key takes a free
// one or evicts the least recently seen of them, so the table never grows.
const limitProbe = 8

// keyText is how much of a key is kept to name it in a notice.
const keyText = 48

// limiter allows burst records per interval for each key, in a table of
// fixed size: a flood of new keys evicts old ones instead of growing
// memory.
type limiter struct {
	rule     string
	key      keyKind
	keyName  string
	field    int // keyField: index of the member path
	interval time.Duration
	burst    int
	shards   [limitShards]limitShard
}

type limitShard struct {
	mu      sync.Mutex
	entries []limitEntry // a power of two
}

type limitEntry struct {
	hash       uint64
	used       bool
	start      int64 // the window began, unix ns
	seen       int64 // the key's last record, unix ns
	count      int   // records in the window
	suppressed int   // records dropped since the last notice
	n          uint8
	text       [keyText]byte
}

func (l *limiter) init(keys int) {
	per := 1
	for per*limitShards < keys || per < limitProbe {
		per <<= 1
	}
	for i := range l.shards {
		l.shards[i].entries = make([]limitEntry, per)
	}
}

// allow counts one record of x's key. A notice with Suppressed > 0 says
// the key's records come again after some were suppressed.
func (l *limiter) allow(x *evalCtx, now time.Time) (bool, Notice) {
	key, ok := x.keyOf(l, x.keyBuf[:0])
	x.keyBuf = key
	if !ok {
		key = append(key[:0], '-') // records without the key share one count
	}
	if now.IsZero() {
		now = time.Now()
	}
	ns := now.UnixNano()
	h := fnv64(key)
	sh := &l.shards[h%limitShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	mask := uint64(len(sh.entries) - 1)
	var e *limitEntry
	victim := -1
	for i := uint64(0); i < limitProbe; i++ {
		j := int((h/limitShards + i) & mask)
		c := &sh.entries[j]
		if c.used && c.hash == h && string(c.text[:c.n]) == string(key[:min(len(key), keyText)]) {
			e = c
			break
		}
		if victim < 0 || !c.used || (sh.entries[victim].used && c.seen < sh.entries[victim].seen) {
			victim = j
		}
	}
	if e == nil {
		e = &sh.entries[victim]
		*e = limitEntry{hash: h, used: true, start: ns, seen: ns, count: 1}
		e.n = uint8(copy(e.text[:], key))
		return true, Notice{}
	}
	e.seen = ns
	if ns-e.start >= int64(l.interval) {
		var n Notice
		if e.suppressed > 0 {
			n = Notice{Key: l.keyName, Value: string(e.text[:e.n]), Suppressed: e.suppressed}
		}
		e.start, e.count, e.suppressed = ns, 1, 0
		return true, n
	}
	e.count++
	if e.count > l.burst {
		e.suppressed++
		return false, Notice{}
	}
	return true, Notice{}
}

func fnv64(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}
