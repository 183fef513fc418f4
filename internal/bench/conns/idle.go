package conns

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"time"

	"golang.org/x/sys/unix"
)

// Idle connections are raw sockets of this process, connected and then
// never read or written: holding one costs this process a descriptor and
// the kernel a socket pair, and nothing that competes with the producers.

const (
	// window is how many connections may be open on our side but not yet
	// counted by the aggregator. It keeps the listen backlog
	// (net.core.somaxconn, 4096 here) from filling: a TCP SYN to a full
	// accept queue is dropped and retried only a second later, and a unix
	// connect would block.
	window = 512
	// perSource is how many TCP connections one source address makes to
	// the listener. Loopback has ~28k ephemeral ports per (source,
	// destination) pair, so connections beyond that come from 127.0.0.2,
	// 127.0.0.3, ...
	perSource = 20000
	// stallLimit is how long opening may go without the aggregator
	// counting one more connection before it is given up.
	stallLimit = 60 * time.Second
	// The aggregator's count is polled every minPause while it counts
	// half a window or more between polls, backing off to maxPause while
	// it counts less.
	minPause = 2 * time.Millisecond
	maxPause = 100 * time.Millisecond
)

// idleSet is a set of idle connections held by this process.
type idleSet struct {
	tcp bool
	fds []int
}

// dialer connects the i-th idle connection (a blocking connect).
type dialer func(i int) (int, error)

// dialerFor returns the dialer of a listener URL: unix:///path or
// tcp://127.0.0.1:PORT.
func dialerFor(rawURL string) (dialer, bool, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, false, err
	}
	switch u.Scheme {
	case "unix":
		sa := &unix.SockaddrUnix{Name: u.Path}
		return func(int) (int, error) {
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return -1, err
			}
			if err := unix.Connect(fd, sa); err != nil {
				unix.Close(fd)
				return -1, err
			}
			return fd, nil
		}, false, nil
	case "tcp":
		ap, err := netip.ParseAddrPort(u.Host)
		if err != nil {
			return nil, false, err
		}
		if !ap.Addr().Is4() || !ap.Addr().IsLoopback() {
			return nil, false, fmt.Errorf("%s: idle TCP connections spread over 127.0.0.x sources need an IPv4 loopback listener", rawURL)
		}
		dst := &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
		return func(i int) (int, error) { return dialTCP(sourceAddr(i), dst) }, true, nil
	}
	return nil, false, fmt.Errorf("%s: idle connections are unix or tcp", rawURL)
}

// sourceAddr is the source address of the i-th idle TCP connection:
// 127.0.0.1 for the first perSource, then 127.0.0.2, ... (all of 127/8 is
// the loopback).
func sourceAddr(i int) [4]byte {
	n := 1 + i/perSource
	return [4]byte{127, 0, byte(n >> 8), byte(n)}
}

func dialTCP(src [4]byte, dst *unix.SockaddrInet4) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	// The port is chosen at connect, for the whole 4-tuple, instead of
	// at bind from the ports free on the source address alone.
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1); err != nil {
		unix.Close(fd)
		return -1, err
	}
	// Closing resets the connection instead of leaving 50,000 sockets in
	// TIME_WAIT on our side (net.ipv4.tcp_max_tw_buckets is 131072 here),
	// where the next cells' connections would find them.
	if err := unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: src}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind %d.%d.%d.%d: %w", src[0], src[1], src[2], src[3], err)
	}
	if err := unix.Connect(fd, dst); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("connect from %d.%d.%d.%d: %w", src[0], src[1], src[2], src[3], err)
	}
	return fd, nil
}

// openIdle opens n idle connections to the listener at rawURL and returns
// once open reports all of them: open is the aggregator's count of open
// connections on that listener minus those it had before. It never has
// more than window connections the aggregator has not counted yet, and
// gives up when the count stops growing for stallLimit. The connections
// opened so far are returned with an error, for the caller to close.
func openIdle(ctx context.Context, rawURL string, n int, open func() (int64, error)) (*idleSet, error) {
	dial, tcp, err := dialerFor(rawURL)
	if err != nil {
		return nil, err
	}
	s := &idleSet{tcp: tcp, fds: make([]int, 0, n)}
	var counted int64
	lastGrowth := time.Now()
	// Each poll is a scrape of the aggregator's /metrics, which costs it
	// a millisecond or more of CPU: while it accepts slowly (TCP, where
	// every accept looks the peer up in /proc, see peerid), poll less
	// often rather than compete with it.
	pause := minPause
	for {
		for len(s.fds) < n && int64(len(s.fds))-counted < window {
			fd, err := dial(len(s.fds))
			if err != nil {
				return s, fmt.Errorf("idle connection %d of %d to %s: %w", len(s.fds)+1, n, rawURL, err)
			}
			s.fds = append(s.fds, fd)
		}
		c, err := open()
		if err != nil {
			return s, err
		}
		if c >= counted+window/2 {
			pause = minPause // it keeps up: poll as soon as the window fills
		} else {
			pause = min(2*pause, maxPause)
		}
		if c != counted {
			counted, lastGrowth = c, time.Now()
		}
		if counted >= int64(n) && len(s.fds) == n {
			return s, nil
		}
		if time.Since(lastGrowth) > stallLimit {
			return s, fmt.Errorf("%s: the aggregator counts %d of %d idle connections, none more for %v", rawURL, counted, len(s.fds), stallLimit)
		}
		if int64(len(s.fds))-counted >= window || len(s.fds) == n {
			// The aggregator is behind: poll its count again shortly.
			select {
			case <-ctx.Done():
				return s, ctx.Err()
			case <-time.After(pause):
			}
		}
	}
}

// close closes every connection; it may be called again.
func (s *idleSet) close() {
	if s == nil {
		return
	}
	for _, fd := range s.fds {
		unix.Close(fd)
	}
	s.fds = nil
}

func (s *idleSet) len() int {
	if s == nil {
		return 0
	}
	return len(s.fds)
}
