package client

import (
	"fmt"
	"net/url"
	"sort"
	"sync"
)

// Conn is what a transport gives the client: a way to send bytes and to
// close. For stream transports (unix, tcp, fifo) Write takes any bytes and
// the client frames records with newlines; for message transports
// (unixgram, udp, shm, mq) one Write is one message holding one or more
// complete newline-terminated records, and the client never splits a record
// across two Writes. A Writer makes every call on its Conn under its own
// mutex, so a Conn need not be safe for concurrent use.
type Conn interface {
	Write(p []byte) (int, error)
	Close() error
}

// DialFunc opens a Conn for u. MaxMessage is the largest Write a message
// transport accepts (0 for stream transports). What it reaches must belong
// to one of the trusted users (the aggregator's; see WithAggregatorUID),
// checked before anything is written to it or received from it; otherwise
// it fails with an error wrapping ErrUntrusted.
type DialFunc func(u *url.URL, trusted owners) (c Conn, maxMessage int, err error)

var (
	dialersMu sync.Mutex
	dialers   = map[string]DialFunc{}
)

// registerDialer makes scheme dialable. Each transport file of this package
// calls it from init().
func registerDialer(scheme string, f DialFunc) {
	dialersMu.Lock()
	defer dialersMu.Unlock()
	if _, dup := dialers[scheme]; dup {
		panic("client: duplicate scheme " + scheme)
	}
	dialers[scheme] = f
}

func lookupDialer(scheme string) (DialFunc, error) {
	dialersMu.Lock()
	defer dialersMu.Unlock()
	f, ok := dialers[scheme]
	if !ok {
		known := make([]string, 0, len(dialers))
		for s := range dialers {
			known = append(known, s)
		}
		sort.Strings(known)
		return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknownScheme, scheme, known)
	}
	return f, nil
}
