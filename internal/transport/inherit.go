package transport

// Sockets handed over by a service manager (systemd socket activation,
// systemd-socket-activate): the daemon collects them into an Inherited
// before it opens its listeners, and each listener factory asks it for a
// socket before binding one itself. A listener takes the socket
//
//   - named by the URL's fdname query parameter (unixgram:///dev/log?fdname=devlog
//     takes the socket the unit calls "devlog", FileDescriptorName=), or
//   - bound to the address it would bind: the same type (stream or
//     datagram) and the same path (unix, unixgram) or IP and port (tcp,
//     udp; an unspecified address, 0.0.0.0 or ::, matches either).
//
// When neither is inherited the listener binds its own, so one
// configuration serves with and without socket activation. An inherited
// socket is served by the same code as one we bound (event loops,
// framing, credentials); what differs is that the service manager owns
// it: its file is never removed, its mode and group are the unit's
// (SocketMode=, SocketGroup=), and it is never shut down for reading at
// exit, since the manager keeps it open for our next start and queues what
// arrives meanwhile.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// FDNameParam is the listen URL query parameter naming an inherited socket.
const FDNameParam = "fdname"

// Inherited is the set of sockets passed to the process. Safe for
// concurrent use; a nil *Inherited holds nothing.
type Inherited struct {
	mu    sync.Mutex
	socks []*InheritedSocket
}

// InheritedSocket is one passed socket, as the kernel describes it.
type InheritedSocket struct {
	FD     int    // descriptor number as passed (for messages)
	Name   string // LISTEN_FDNAMES entry
	Type   int    // unix.SOCK_STREAM, unix.SOCK_DGRAM, ...
	Family int    // unix.AF_UNIX, AF_INET, AF_INET6
	// Path is an AF_UNIX socket's path ("@name" for an abstract one).
	Path string
	// Addr is an AF_INET/AF_INET6 socket's bound address.
	Addr      netip.AddrPort
	Listening bool // SO_ACCEPTCONN: a listening stream socket

	file  *os.File
	taken bool
}

// NewInherited returns an empty set.
func NewInherited() *Inherited { return &Inherited{} }

// Add inspects f (a socket passed as descriptor fd under name) and adds it
// to the set. It fails for a descriptor that is not an AF_UNIX or IP
// socket: such a descriptor can serve no listener. Unix sockets get
// SO_PASSCRED, as sockets we bind do, so datagrams carry their sender's
// credentials whether or not the unit set PassCredentials=.
func (in *Inherited) Add(f *os.File, fd int, name string) error {
	s := &InheritedSocket{FD: fd, Name: name, file: f}
	raw := int(f.Fd())
	var err error
	if s.Type, err = unix.GetsockoptInt(raw, unix.SOL_SOCKET, unix.SO_TYPE); err != nil {
		return fmt.Errorf("inherited fd %d (%q) is not a socket: %w", fd, name, err)
	}
	if s.Family, err = unix.GetsockoptInt(raw, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil {
		return fmt.Errorf("inherited fd %d (%q): SO_DOMAIN: %w", fd, name, err)
	}
	acc, _ := unix.GetsockoptInt(raw, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	s.Listening = acc == 1
	sa, err := unix.Getsockname(raw)
	if err != nil {
		return fmt.Errorf("inherited fd %d (%q): getsockname: %w", fd, name, err)
	}
	switch a := sa.(type) {
	case *unix.SockaddrUnix:
		s.Path = a.Name
		if err := unix.SetsockoptInt(raw, unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
			return fmt.Errorf("inherited fd %d (%q): SO_PASSCRED: %w", fd, name, err)
		}
	case *unix.SockaddrInet4:
		s.Addr = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		s.Addr = netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
	default:
		return fmt.Errorf("inherited fd %d (%q) is a socket of family %d; only unix and IP sockets can serve a listener", fd, name, s.Family)
	}
	in.mu.Lock()
	in.socks = append(in.socks, s)
	in.mu.Unlock()
	return nil
}

// String describes the socket for messages: `fd 3 "devlog" (unix datagram /dev/log)`.
func (s *InheritedSocket) String() string {
	kind := "socket of type " + fmt.Sprint(s.Type)
	switch s.Type {
	case unix.SOCK_STREAM:
		kind = "stream"
		if !s.Listening {
			kind = "connected stream" // Accept=yes
		}
	case unix.SOCK_DGRAM:
		kind = "datagram"
	case unix.SOCK_SEQPACKET:
		kind = "seqpacket"
	}
	where := s.Path
	fam := "unix"
	if s.Family != unix.AF_UNIX {
		fam, where = "IP", s.Addr.String()
	}
	return fmt.Sprintf("fd %d %q (%s %s %s)", s.FD, s.Name, fam, kind, where)
}

// Match tells whether an inherited socket is bound where a listener would bind.
type Match func(s *InheritedSocket) bool

// MatchPath matches an AF_UNIX socket bound to path.
func MatchPath(path string) Match {
	return func(s *InheritedSocket) bool { return s.Family == unix.AF_UNIX && s.Path == path }
}

// MatchAddr matches an IP socket bound to ap. Unspecified addresses
// (0.0.0.0, ::) match each other: ListenStream=514 binds [::]:514, which
// also serves IPv4. Port 0 matches nothing: it asks for a fresh port.
func MatchAddr(ap netip.AddrPort) Match {
	want := netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	return func(s *InheritedSocket) bool {
		if s.Family == unix.AF_UNIX || want.Port() == 0 || s.Addr.Port() != want.Port() {
			return false
		}
		return s.Addr.Addr() == want.Addr() || (s.Addr.Addr().IsUnspecified() && want.Addr().IsUnspecified())
	}
}

// Take returns the inherited socket a listener of socket type typ should
// serve: the one called name (if name is set and such a socket was
// passed), else the first one match accepts; nil when there is none, and
// then the listener binds its own. A socket named by name but of the wrong
// type is an error wrapping ErrBadAddress. The socket is marked taken;
// the caller owns it (Listener or PacketConn, or Close).
func (in *Inherited) Take(name string, typ int, match Match) (*InheritedSocket, error) {
	if in == nil {
		return nil, nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if name != "" {
		for _, s := range in.socks {
			if s.taken || s.Name != name {
				continue
			}
			if err := s.fits(typ); err != nil {
				return nil, err
			}
			s.taken = true
			return s, nil
		}
	}
	for _, s := range in.socks {
		if s.taken || s.Type != typ || !match(s) {
			continue
		}
		if err := s.fits(typ); err != nil {
			return nil, err
		}
		s.taken = true
		return s, nil
	}
	return nil, nil
}

func (s *InheritedSocket) fits(typ int) error {
	switch {
	case s.Type != typ:
		want := "stream"
		if typ == unix.SOCK_DGRAM {
			want = "datagram"
		}
		return fmt.Errorf("%w: inherited %s is not a %s socket", ErrBadAddress, s, want)
	case typ == unix.SOCK_STREAM && !s.Listening:
		return fmt.Errorf("%w: inherited %s is a connection, not a listening socket (the socket unit needs Accept=no)", ErrBadAddress, s)
	}
	return nil
}

// Unused lists the sockets no listener took.
func (in *Inherited) Unused() []*InheritedSocket {
	if in == nil {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []*InheritedSocket
	for _, s := range in.socks {
		if !s.taken {
			out = append(out, s)
		}
	}
	return out
}

// Close closes the sockets no listener took. Safe on nil.
func (in *Inherited) Close() {
	for _, s := range in.Unused() {
		s.Close()
	}
}

// ErrUnusedSocket wraps the error for a passed socket no listener serves.
var ErrUnusedSocket = errors.New("inherited socket matches no listener")

// CheckAllTaken returns an error naming every socket no listener took:
// systemd keeps such a socket open and clients queue on it (a /dev/log that
// nobody reads blocks every process that logs), so that is a start-up
// error, not a warning.
func (in *Inherited) CheckAllTaken() error {
	var errs []error
	for _, s := range in.Unused() {
		hint := "add a listen URL for it"
		switch {
		case s.Family == unix.AF_UNIX && s.Type == unix.SOCK_DGRAM:
			hint = "add listen URL unixgram://" + s.Path
		case s.Family == unix.AF_UNIX && s.Type == unix.SOCK_STREAM:
			hint = "add listen URL unix://" + s.Path
		case s.Type == unix.SOCK_STREAM:
			hint = "add listen URL tcp://" + s.Addr.String()
		case s.Type == unix.SOCK_DGRAM:
			hint = "add listen URL udp://" + s.Addr.String()
		}
		errs = append(errs, fmt.Errorf("%w: %s; %s, or ?%s=%s on the URL that should serve it, or remove it from the socket unit",
			ErrUnusedSocket, s, hint, FDNameParam, s.Name))
	}
	return errors.Join(errs...)
}

// Close closes the inherited descriptor (our copy; the manager keeps its own).
func (s *InheritedSocket) Close() error { return s.file.Close() }

// Listener turns a listening stream socket into a net.Listener and closes
// the inherited descriptor (the listener holds a duplicate). A unix
// listener is told not to unlink its path on close: the file is the
// service manager's.
func (s *InheritedSocket) Listener() (net.Listener, error) {
	defer s.file.Close()
	ln, err := net.FileListener(s.file)
	if err != nil {
		return nil, fmt.Errorf("inherited %s: %w", s, err)
	}
	if ul, ok := ln.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
	}
	return ln, nil
}

// PacketConn turns a datagram socket into a net.PacketConn
// (*net.UnixConn or *net.UDPConn) and closes the inherited descriptor.
func (s *InheritedSocket) PacketConn() (net.PacketConn, error) {
	defer s.file.Close()
	pc, err := net.FilePacketConn(s.file)
	if err != nil {
		return nil, fmt.Errorf("inherited %s: %w", s, err)
	}
	return pc, nil
}

// SplitFDName removes the fdname query parameter from a listen URL and
// returns the URL without it and the name ("" when absent).
func SplitFDName(raw string) (string, string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return raw, "", err
	}
	q := u.Query()
	if !q.Has(FDNameParam) {
		return raw, "", nil
	}
	name := q.Get(FDNameParam)
	q.Del(FDNameParam)
	u.RawQuery = q.Encode()
	return u.String(), name, nil
}

// ClaimInherited is the Claim of a path whose socket the service manager
// bound: it takes PATH.lock where it can, so that an aggregator started by
// hand on the same path is refused instead of replacing the manager's
// socket, and it never removes the socket. A lock held by another live
// process is an error (ErrInUse); a lock that cannot be created (a
// read-only or root-owned directory such as /dev for /dev/log, under a
// hardened unit) is skipped: the manager, not a lock file, keeps a single
// instance on the address then.
func ClaimInherited(path string) (*Claim, error) {
	c := &Claim{Path: path, kind: NodeSocket}
	if len(path) > 0 && path[0] == '@' {
		c.abstract = true
		return c, nil
	}
	lock, err := AcquireLock(path + ".lock")
	if errors.Is(err, ErrInUse) {
		return nil, err
	}
	c.lock = lock // nil when it could not be taken; Release copes
	return c, nil
}
