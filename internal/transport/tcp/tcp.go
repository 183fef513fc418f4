// Package tcp is the TCP listener (scheme "tcp", e.g. tcp://127.0.0.1:9000).
//
// An empty host (tcp://:9000) binds 127.0.0.1: a log aggregator listens on
// the loopback unless told otherwise; tcp://0.0.0.0:9000 binds every
// interface. Port 0 picks a free port, and URL reports the bound one.
//
// Connections are served on the event loops by stream.ServeListener (an
// idle one costs an fd, no goroutine): newline-delimited records or RFC
// 6587 octet-counted syslog frames. Records carry the peer's address in
// agg.peer.addr, and the sending process where a loopback lookup finds it
// (package peerid, via "lookup").
//
// Lifetimes: New binds; Run serves until ctx ends, then drains as described
// in package transport. Close releases a listener whose Run was never called.
package tcp

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/peerid"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/stream"
)

// Scheme is the URL scheme of this transport.
const Scheme = "tcp"

func init() { transport.Register(Scheme, New) }

// Listener is a bound TCP socket.
type Listener struct {
	ln        *net.TCPListener
	url       string
	d         transport.Deps
	closeOnce sync.Once
	closeErr  error
}

// ListenAddr returns the host:port that u asks to bind, with the loopback
// for an empty host. It errors (wrapping transport.ErrBadAddress) when u
// has no port or has a path.
func ListenAddr(u *url.URL) (string, error) {
	if u.Opaque != "" || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("%w: %s has a path; want tcp://HOST:PORT", transport.ErrBadAddress, u.String())
	}
	port := u.Port()
	if port == "" {
		return "", fmt.Errorf("%w: %s has no port; want tcp://HOST:PORT", transport.ErrBadAddress, u.String())
	}
	host := u.Hostname()
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// New binds the address named by u.
func New(u *url.URL, d transport.Deps) (transport.Listener, error) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	addr, err := ListenAddr(u)
	if err != nil {
		return nil, err
	}
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", transport.ErrBadAddress, addr, err)
	}
	var ln *net.TCPListener
	inh, err := d.Inherited.Take(d.FDName, unix.SOCK_STREAM, transport.MatchAddr(ta.AddrPort()))
	switch {
	case err != nil:
		return nil, err
	case inh != nil:
		if ln, err = fromInherited(inh); err != nil {
			return nil, err
		}
	default:
		if ln, err = net.ListenTCP("tcp", ta); err != nil {
			return nil, fmt.Errorf("%w: listen %s: %w", transport.ErrBadAddress, addr, err)
		}
	}
	l := &Listener{ln: ln, url: Scheme + "://" + ln.Addr().String()}
	transport.Relabel(&d, l.url)
	l.d = d
	return l, nil
}

// fromInherited serves a listening socket the service manager passed.
func fromInherited(s *transport.InheritedSocket) (*net.TCPListener, error) {
	if s.Family == unix.AF_UNIX {
		s.Close()
		return nil, fmt.Errorf("%w: inherited %s is not a TCP socket", transport.ErrBadAddress, s)
	}
	ln, err := s.Listener()
	if err != nil {
		return nil, err
	}
	return ln.(*net.TCPListener), nil
}

// URL implements transport.Listener; it names the bound port.
func (l *Listener) URL() string { return l.url }

// Close implements transport.Listener. Safe after Run returned.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { l.closeErr = l.ln.Close() })
	return l.closeErr
}

// Run implements transport.Listener.
func (l *Listener) Run(ctx context.Context) error {
	defer l.Close()
	return stream.ServeListener(ctx, l.ln, stream.ListenerConfig{
		Transport:     Scheme,
		URL:           l.url,
		Deps:          l.d,
		OctetCounting: true,
		Setup:         l.setup,
	})
}

func (l *Listener) setup(fd int, peer unix.Sockaddr, meta *record.Meta) {
	// Network senders put a HOSTNAME in their RFC 3164 headers; rsyslog's
	// imtcp and imptcp parse it too (see record.Meta.ParseHostname).
	meta.ParseHostname = true
	// Once per connection: find the process behind a loopback peer
	// (socket diagnostics + /proc, bounded by a budget; see peerid). A
	// remote or unfindable peer keeps just its address.
	if ra := tcpAddr(peer); ra != nil {
		meta.Peer = record.Peer{Addr: ra.String()}
		if ra.IP.IsLoopback() {
			if lsa, err := unix.Getsockname(fd); err == nil {
				if la := tcpAddr(lsa); la != nil {
					meta.Peer, _ = peerid.LookupTCP(la, ra, peerid.DefaultBudget)
				}
			}
		}
	}
	// What Go's Accept sets on a TCP connection, which the listener's raw
	// accept does not: no Nagle delay (acknowledgements are small writes)
	// and keep-alive probes, so a peer that vanished frees its descriptor.
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, keepAliveSeconds)
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, keepAliveSeconds)
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPCNT, keepAliveProbes)
	// A fixed SO_RCVBUF turns off TCP's receive-buffer autotuning; with the
	// 4 MiB unix sockets get, a producer on the aggregator's CPU spent three
	// times the CPU per record in its sends (docs/adr/0045).
	if l.d.Opts.TCPRcvBuf <= 0 {
		return
	}
	got, err := stream.SetRcvBuf(fd, l.d.Opts.TCPRcvBuf)
	if err != nil {
		l.d.Log.Debug("receive buffer", "listener", l.url, "err", err)
	}
	if l.d.Metrics != nil && got > 0 {
		l.d.Metrics.RcvBuf.Set(float64(got))
	}
}

// Go's defaults for accepted TCP connections (net.KeepAliveConfig).
const (
	keepAliveSeconds = 15
	keepAliveProbes  = 9
)

// tcpAddr converts an address accept or getsockname returned.
func tcpAddr(sa unix.Sockaddr) *net.TCPAddr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(append([]byte(nil), a.Addr[:]...)), Port: a.Port}
	case *unix.SockaddrInet6:
		ta := &net.TCPAddr{IP: net.IP(append([]byte(nil), a.Addr[:]...)), Port: a.Port}
		if a.ZoneId != 0 {
			ta.Zone = strconv.FormatUint(uint64(a.ZoneId), 10)
			if ifi, err := net.InterfaceByIndex(int(a.ZoneId)); err == nil {
				ta.Zone = ifi.Name
			}
		}
		return ta
	}
	return nil
}
