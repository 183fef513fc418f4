package rawchan

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Socket mechanisms Dial knows. The names are the ones the lab uses on
// the command line (--transport, --mech).
const (
	UnixStream = "unixsock" // unix stream socketpair (seed 001's bench4)
	UnixDgram  = "unixgram" // unix datagram socketpair
	TCP        = "tcp"      // loopback TCP, TCP_NODELAY on both ends
	UDP        = "udp"      // loopback UDP, both ends connected
)

// ErrUnknownMechanism is returned (wrapped) by Dial for a name it does not
// know.
var ErrUnknownMechanism = errors.New("unknown raw channel mechanism")

// Dial returns a connected pair of blocking, close-on-exec descriptors
// for mech: one for the measuring side, one for the echo side (a child
// inherits it through exec.Cmd.ExtraFiles, which clears close-on-exec).
// dgram tells whether the kernel keeps message boundaries.
func Dial(mech string) (parent, child int, dgram bool, err error) {
	switch mech {
	case UnixStream, UnixDgram:
		typ := unix.SOCK_STREAM
		if mech == UnixDgram {
			typ = unix.SOCK_DGRAM
		}
		fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return -1, -1, false, fmt.Errorf("socketpair: %w", err)
		}
		return fds[0], fds[1], mech == UnixDgram, nil
	case TCP:
		parent, child, err = TCPPair()
		return parent, child, false, err
	case UDP:
		parent, child, err = UDPPair()
		return parent, child, true, err
	}
	return -1, -1, false, fmt.Errorf("%w: %q", ErrUnknownMechanism, mech)
}

// loopback binds fd to 127.0.0.1 on an ephemeral port and returns the
// address it got.
func loopback(fd int) (*unix.SockaddrInet4, error) {
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return nil, fmt.Errorf("bind 127.0.0.1:0: %w", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return nil, fmt.Errorf("getsockname: %w", err)
	}
	in, ok := sa.(*unix.SockaddrInet4)
	if !ok {
		return nil, errors.New("getsockname: not an IPv4 address")
	}
	return in, nil
}

// TCPPair returns two connected loopback TCP sockets (client, then the
// accepted end) with Nagle off: a ping-pong of small writes would
// otherwise wait for delayed ACKs.
func TCPPair() (int, int, error) {
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(ln)
	sa, err := loopback(ln)
	if err != nil {
		return -1, -1, err
	}
	if err := unix.Listen(ln, 1); err != nil {
		return -1, -1, fmt.Errorf("listen: %w", err)
	}
	c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("socket: %w", err)
	}
	if err := unix.Connect(c, sa); err != nil {
		unix.Close(c)
		return -1, -1, fmt.Errorf("connect %d: %w", sa.Port, err)
	}
	s, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
	if err != nil {
		unix.Close(c)
		return -1, -1, fmt.Errorf("accept: %w", err)
	}
	for _, fd := range []int{c, s} {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
			unix.Close(c)
			unix.Close(s)
			return -1, -1, fmt.Errorf("TCP_NODELAY: %w", err)
		}
	}
	return c, s, nil
}

// UDPPair returns two loopback UDP sockets connected to each other.
func UDPPair() (int, int, error) {
	fds := [2]int{-1, -1}
	var addrs [2]*unix.SockaddrInet4
	closeAll := func() {
		for _, fd := range fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}
	for i := range fds {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			closeAll()
			return -1, -1, fmt.Errorf("socket: %w", err)
		}
		fds[i] = fd
		if addrs[i], err = loopback(fd); err != nil {
			closeAll()
			return -1, -1, err
		}
	}
	for i := range fds {
		if err := unix.Connect(fds[i], addrs[1-i]); err != nil {
			closeAll()
			return -1, -1, fmt.Errorf("connect udp: %w", err)
		}
	}
	return fds[0], fds[1], nil
}
