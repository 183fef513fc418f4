// Package unixgram is the unix datagram socket transport
// (unixgram:///path/to/socket), the transport of syslog(3) and logger(1)
// on /dev/log.
//
// Open takes the path (transport.ClaimPath: PATH.lock, so a second
// instance fails with ErrInUse; a stale socket of ours is replaced; a
// regular file or another user's socket is an error and left untouched) and
// binds it. The socket file gets exactly Options.SocketMode and SocketGID
// and is removed when Run returns or Close is called (only if it is still
// the file we bound).
//
// # Hostnames
//
// An RFC 3164 header on this socket is read without a HOSTNAME by default,
// as rsyslog's imuxsock and syslog-ng's unix-dgram() read /dev/log: its
// clients (glibc's syslog(3), logger, journald, Go's log/syslog) write
// none, and "<13>Nov 23 04:33:41 myapp started" would otherwise come from
// host "myapp" (see record.Meta.ParseHostname). Relays that write one to a
// unix datagram socket (rsyslog's omuxsock, syslog-ng's unix-dgram(),
// logger --rfc3164 -u, winston's unix transport) need
// unixgram:///path?parse_hostname=on, as imuxsock needs ParseHostname="on";
// then a local client's "tag[pid]:" is still told apart, as on every
// network listener, but a tag ended by a space is taken for a hostname.
// "off" is the default; any other value, or another parameter, is an error
// at Open.
//
// Every datagram carries the sender's credentials (SO_PASSCRED makes the
// kernel attach SCM_CREDENTIALS to each one, whether or not the sender sent
// any), so each record has peer pid/uid/gid with via "kernel". Receiving,
// framing, metrics and the shutdown drain are those of package dgram; at
// shutdown the socket is shut down for reading first, so senders get EPIPE
// instead of queueing datagrams that would be lost with the socket.
//
// # Where loss happens
//
// A unix datagram socket never drops at the receiver. The receive queue of a
// bound socket holds at most net.unix.max_dgram_qlen datagrams (10 on the
// kernel default, as on our test machines; systemd hosts usually set 512),
// and the bytes in flight are charged to the sender's SO_SNDBUF, not to our
// SO_RCVBUF. When the queue is full a blocking sender blocks in send(2) and a
// non-blocking sender gets EAGAIN (glibc's syslog(3) then drops the message).
// That loss happens at the sender and is invisible to us:
// dropped_total{cause="kernel_rxq_ovfl"} stays 0 for this transport, and only
// producer sequence numbers can reveal gaps. It is also why unix datagram
// throughput is bounded by how fast we wake: a queue of 10 is refilled only
// after we read.
//
// # Concurrency and lifetimes
//
// A Listener is created bound by Open; Run is called at most once and serves
// from one goroutine; Close may be called at any time and more than once.
package unixgram

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/dgram"
)

// Scheme is the URL scheme and transport name.
const Scheme = "unixgram"

func init() { transport.Register(Scheme, Open) }

// Listener is a bound unix datagram socket.
type Listener struct {
	path  string
	url   string
	claim *transport.Claim
	rx    *dgram.Receiver

	once sync.Once
	err  error
}

// maxPath is the room in sockaddr_un.sun_path, less the terminating NUL.
const maxPath = len(syscall.RawSockaddrUnix{}.Path) - 1

// ParseHostnameParam is the listen URL parameter that makes the listener
// read a HOSTNAME in RFC 3164 headers: "on" or "off" (the default).
const ParseHostnameParam = "parse_hostname"

// parseHostname reads the URL's parameters: parse_hostname, and no other.
func parseHostname(u *url.URL) (bool, error) {
	on := false
	for k, vs := range u.Query() {
		if k != ParseHostnameParam {
			return false, fmt.Errorf("%w: %s: unknown parameter %q (known: %s)", transport.ErrBadAddress, u.Redacted(), k, ParseHostnameParam)
		}
		switch {
		case len(vs) != 1:
			return false, fmt.Errorf("%w: %s: %s given %d times", transport.ErrBadAddress, u.Redacted(), k, len(vs))
		case vs[0] == "on":
			on = true
		case vs[0] != "off":
			return false, fmt.Errorf("%w: %s: %s must be on or off, not %q", transport.ErrBadAddress, u.Redacted(), k, vs[0])
		}
	}
	return on, nil
}

// Open binds the socket named by u (a transport.Factory).
func Open(u *url.URL, d transport.Deps) (transport.Listener, error) {
	path, err := transport.PathOf(u)
	if err != nil {
		return nil, err
	}
	parseHost, err := parseHostname(u)
	if err != nil {
		return nil, err
	}
	if len(path) > maxPath {
		return nil, fmt.Errorf("%w: unix socket path longer than %d bytes: %s", transport.ErrBadAddress, maxPath, path)
	}
	inh, err := d.Inherited.Take(d.FDName, unix.SOCK_DGRAM, transport.MatchPath(path))
	if err != nil {
		return nil, err
	}
	var (
		claim *transport.Claim
		conn  *net.UnixConn
	)
	if inh != nil {
		claim, conn, err = fromInherited(inh)
		if err != nil {
			return nil, err
		}
		path = inh.Path
	} else {
		claim, err = transport.ClaimPath(path, transport.NodeSocket)
		if err != nil {
			return nil, err
		}
		conn, err = claim.ListenUnixgram(d.Opts)
		if err != nil {
			claim.Release()
			return nil, err
		}
	}
	l := &Listener{path: path, url: canonical(path, parseHost), claim: claim}
	transport.Relabel(&d, l.url)
	fail := func(err error) (transport.Listener, error) {
		conn.Close()
		claim.Release()
		return nil, err
	}
	stopArrivals := func(fd int) error { return unix.Shutdown(fd, unix.SHUT_RD) }
	if inh != nil {
		// The manager keeps the socket for our next start: shutting it
		// down would make every later sender fail with EPIPE. What
		// arrives after our drain waits in its queue instead.
		stopArrivals = nil
	}
	l.rx, err = dgram.New(dgram.Config{
		Conn:         conn,
		Deps:         d,
		Meta:         record.Meta{Transport: Scheme, Listener: l.url, ParseHostname: parseHost},
		Creds:        true,
		StopArrivals: stopArrivals,
		Detach:       true,
	})
	if err != nil {
		return fail(err)
	}
	return l, nil
}

// fromInherited serves a datagram socket the service manager passed
// (/dev/log from a socket unit, journald's /run/systemd/journal/syslog).
func fromInherited(s *transport.InheritedSocket) (*transport.Claim, *net.UnixConn, error) {
	if s.Family != unix.AF_UNIX {
		s.Close()
		return nil, nil, fmt.Errorf("%w: inherited %s is not a unix socket", transport.ErrBadAddress, s)
	}
	claim, err := transport.ClaimInherited(s.Path)
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	pc, err := s.PacketConn()
	if err != nil {
		claim.Release()
		return nil, nil, err
	}
	return claim, pc.(*net.UnixConn), nil
}

// canonical is the listener's URL: its path, and parse_hostname=on when
// it reads hostnames, so that agg.listener says how its records were read.
func canonical(path string, parseHost bool) string {
	u := Scheme + ":" + path
	if len(path) > 0 && path[0] == '/' {
		u = Scheme + "://" + path
	}
	if parseHost {
		u += "?" + ParseHostnameParam + "=on"
	}
	return u
}

// Run implements transport.Listener.
func (l *Listener) Run(ctx context.Context) error {
	err := l.rx.Run(ctx)
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	return err
}

// URL implements transport.Listener.
func (l *Listener) URL() string { return l.url }

// Stats exposes the receiver's counters (tests, benchmarks).
func (l *Listener) Stats() dgram.Stats { return l.rx.Stats() }

// Close implements transport.Listener: it closes the socket, removes the
// socket file (if it is still the one we bound) and releases the lock.
func (l *Listener) Close() error {
	l.once.Do(func() {
		l.err = l.rx.Close()
		l.claim.Release()
	})
	return l.err
}
