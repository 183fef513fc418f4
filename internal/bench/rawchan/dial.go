package rawchan

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

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
	c, s, _, err := DialTCP(TCPOptions{})
	return c, s, err
}

// TCPOptions shape the loopback TCP pair of DialTCP. The zero value is
// TCPPair's: Nagle off, the two ends connected directly.
type TCPOptions struct {
	// Nagle keeps Nagle's algorithm on (no TCP_NODELAY), as a plain
	// socket has it: what a stream of writes of a throughput experiment
	// (bufsweep) meets, where the ping-pong experiments turn it off.
	Nagle bool
	// Via, if set, puts a proxy between the ends: it gets the accepting
	// end's address ("127.0.0.1:PORT") and returns the address the
	// dialling end connects to instead, and a function that stops the
	// proxy (bufsweep's toxiproxy).
	Via func(upstream string) (addr string, stop func(), err error)
}

// acceptWait bounds the wait for the accepted end: a proxy (Via) dials
// it only after it accepted the dialling end, and a broken one must not
// hang the caller.
const acceptWait = 10 * time.Second

// DialTCP returns two connected loopback TCP sockets, blocking and
// close-on-exec: the dialling end, then the accepted end, and stop, which
// stops o.Via's proxy (a no-op without one) and must be called once both
// ends are done with.
func DialTCP(o TCPOptions) (dialer, accepted int, stop func(), err error) {
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, nil, fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(ln)
	sa, err := loopback(ln)
	if err != nil {
		return -1, -1, nil, err
	}
	if err := unix.Listen(ln, 1); err != nil {
		return -1, -1, nil, fmt.Errorf("listen: %w", err)
	}
	target, stop := sa, func() {}
	if o.Via != nil {
		addr, s, err := o.Via("127.0.0.1:" + strconv.Itoa(sa.Port))
		if err != nil {
			return -1, -1, nil, err
		}
		stop = s
		_, ps, _ := strings.Cut(addr, ":")
		port, err := strconv.Atoi(ps)
		if err != nil {
			stop()
			return -1, -1, nil, fmt.Errorf("proxy address %q: %w", addr, err)
		}
		target = &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}
	}
	fail := func(err error, fds ...int) (int, int, func(), error) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		stop()
		return -1, -1, nil, err
	}
	c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("socket: %w", err))
	}
	if err := unix.Connect(c, target); err != nil {
		return fail(fmt.Errorf("connect %d: %w", target.Port, err), c)
	}
	if _, err := unix.Poll([]unix.PollFd{{Fd: int32(ln), Events: unix.POLLIN}}, int(acceptWait/time.Millisecond)); err != nil {
		return fail(fmt.Errorf("poll: %w", err), c)
	}
	// Non-blocking, so that an end that never came (the wait expired)
	// is EAGAIN rather than a hang; blocking again once accepted.
	s, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
	if err == nil {
		if err = unix.SetNonblock(s, false); err != nil {
			unix.Close(s)
		}
	}
	if err != nil {
		return fail(fmt.Errorf("accept: %w", err), c)
	}
	if !o.Nagle {
		for _, fd := range []int{c, s} {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
				return fail(fmt.Errorf("TCP_NODELAY: %w", err), c, s)
			}
		}
	}
	return c, s, stop, nil
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
