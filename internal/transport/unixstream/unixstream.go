// Package unixstream is the unix stream socket listener (scheme "unix",
// e.g. unix:///run/logagg.sock).
//
// Connections are served on the event loops by stream.ServeListener (an
// idle one costs an fd, no goroutine): newline-delimited records, or RFC
// 6587 octet-counted syslog frames. The
// sender's pid/uid/gid come from SO_PEERCRED, read once per connection
// (the credentials of the process that connected, as the kernel recorded
// them at connect(2)), so every record carries agg.peer with via "kernel".
//
// Lifetimes: New takes the path (transport.ClaimPath: PATH.lock, a stale
// socket of ours replaced, anything else left untouched and reported) and
// binds with the exact mode and group. Run serves until ctx ends, then
// drains as described in package transport, removes the socket file and
// releases the lock. Close releases a listener whose Run was never called.
package unixstream

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/stream"
)

// Scheme is the URL scheme of this transport.
const Scheme = "unix"

func init() { transport.Register(Scheme, New) }

// Listener is a bound unix stream socket.
type Listener struct {
	ln        *net.UnixListener
	claim     *transport.Claim
	path      string
	url       string
	d         transport.Deps
	closeOnce sync.Once
	closeErr  error
}

// New binds the socket named by u (unix:///path).
func New(u *url.URL, d transport.Deps) (transport.Listener, error) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	path, err := transport.PathOf(u)
	if err != nil {
		return nil, err
	}
	if s, err := d.Inherited.Take(d.FDName, unix.SOCK_STREAM, transport.MatchPath(path)); err != nil || s != nil {
		if err != nil {
			return nil, err
		}
		return fromInherited(s, d)
	}
	claim, err := transport.ClaimPath(path, transport.NodeSocket)
	if err != nil {
		return nil, err
	}
	ln, err := claim.ListenUnix(d.Opts)
	if err != nil {
		claim.Release()
		return nil, err
	}
	canonical := (&url.URL{Scheme: Scheme, Path: path}).String()
	transport.Relabel(&d, canonical)
	return &Listener{ln: ln, claim: claim, path: path, url: canonical, d: d}, nil
}

// fromInherited serves a listening socket the service manager passed. Its
// path is the one it is bound to (a socket taken by name may be bound
// elsewhere than the URL says); the file stays when we close.
func fromInherited(s *transport.InheritedSocket, d transport.Deps) (transport.Listener, error) {
	if s.Family != unix.AF_UNIX {
		s.Close()
		return nil, fmt.Errorf("%w: inherited %s is not a unix socket", transport.ErrBadAddress, s)
	}
	claim, err := transport.ClaimInherited(s.Path)
	if err != nil {
		s.Close()
		return nil, err
	}
	ln, err := s.Listener()
	if err != nil {
		claim.Release()
		return nil, err
	}
	canonical := (&url.URL{Scheme: Scheme, Path: s.Path}).String()
	transport.Relabel(&d, canonical)
	return &Listener{ln: ln.(*net.UnixListener), claim: claim, path: s.Path, url: canonical, d: d}, nil
}

// URL implements transport.Listener.
func (l *Listener) URL() string { return l.url }

// Close implements transport.Listener: it closes the socket, removes its
// file and releases the lock. Safe after Run returned.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.closeErr = l.ln.Close()
		l.claim.Release()
	})
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
		ReadCoalesce:  l.d.Opts.ReadCoalesce,
	})
}

// setup reads the peer's credentials and applies the receive buffer size.
// RFC 3164 headers are read with a hostname, as rsyslog's imptcp reads a
// unix stream socket: forwarders (syslog-ng's unix-stream()) put one there,
// and local clients' "tag[pid]:" or "tag:" is never taken for one.
func (l *Listener) setup(fd int, _ unix.Sockaddr, meta *record.Meta) {
	meta.ParseHostname = true
	if cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
		meta.Peer = record.Peer{HasCreds: true, PID: cred.Pid, UID: cred.Uid, GID: cred.Gid, Via: "kernel"}
	}
	if n := l.d.Opts.RcvBuf; n > 0 {
		got, err := stream.SetRcvBuf(fd, n)
		if err != nil {
			l.d.Log.Debug("receive buffer", "listener", l.url, "err", err)
		}
		if l.d.Metrics != nil && got > 0 {
			l.d.Metrics.RcvBuf.Set(float64(got))
		}
	}
}
