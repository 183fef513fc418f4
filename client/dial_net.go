package client

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
)

// Largest messages the message transports accept by default. 65507 is the
// largest UDP payload over IPv4; 64 KiB for unix datagrams stays far below
// the default socket send buffer (212992) and the aggregator's record limit.
const (
	maxUDPMessage      = 65507
	maxUnixgramMessage = 64 << 10
)

// ErrNoReader is returned when dialing a FIFO that no process has open for
// reading (the aggregator is not running).
var ErrNoReader = errors.New("no process is reading the FIFO")

var osGetpid = os.Getpid

func init() {
	registerDialer("unix", dialUnix)
	registerDialer("unixgram", dialUnixgram)
	registerDialer("tcp", dialTCP)
	registerDialer("udp", dialUDP)
	registerDialer("fifo", dialFIFO)
}

// pathOf returns the filesystem path of unix:///abs/path (or unix://rel/path).
func pathOf(u *url.URL) (string, error) {
	p := u.Opaque
	if p == "" {
		p = u.Host + u.Path
	}
	if p == "" {
		return "", fmt.Errorf("%w: %q has no path", ErrBadURL, u.String())
	}
	return p, nil
}

// hostPort fills an empty host with 127.0.0.1: a local aggregator is the
// only sensible default and "tcp://:9000" is how people write it.
func hostPort(u *url.URL) (string, error) {
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %w", ErrBadURL, u.String(), err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

func dialUnix(u *url.URL, trusted owners) (Conn, int, error) {
	p, err := pathOf(u)
	if err != nil {
		return nil, 0, err
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: p, Net: "unix"})
	if err != nil {
		return nil, 0, err
	}
	if err := trusted.checkSocket(p, c); err != nil {
		c.Close()
		return nil, 0, err
	}
	return c, 0, nil
}

// dialUnixgram checks the socket file: a datagram socket has no peer
// credentials to check.
func dialUnixgram(u *url.URL, trusted owners) (Conn, int, error) {
	p, err := pathOf(u)
	if err != nil {
		return nil, 0, err
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: p, Net: "unixgram"})
	if err != nil {
		return nil, 0, err
	}
	if !strings.HasPrefix(p, "@") {
		if err := trusted.checkPath(p, "socket"); err != nil {
			c.Close()
			return nil, 0, err
		}
	}
	return c, maxUnixgramMessage, nil
}

// dialTCP and dialUDP check nothing: an address has no owner (a port
// below 1024 at least needs privileges to bind).
func dialTCP(u *url.URL, _ owners) (Conn, int, error) {
	a, err := hostPort(u)
	if err != nil {
		return nil, 0, err
	}
	c, err := net.Dial("tcp", a)
	if err != nil {
		return nil, 0, err
	}
	return c, 0, nil
}

func dialUDP(u *url.URL, _ owners) (Conn, int, error) {
	a, err := hostPort(u)
	if err != nil {
		return nil, 0, err
	}
	c, err := net.Dial("udp", a)
	if err != nil {
		return nil, 0, err
	}
	return c, maxUDPMessage, nil
}

// dialFIFO opens the FIFO for writing without blocking: a plain O_WRONLY
// open would hang until a reader appears, which for a producer started
// before the aggregator means hanging forever with no message. The fd stays
// non-blocking so that writes go through Go's poller and Close unblocks them.
// Writes larger than PIPE_BUF (4096) may interleave with other writers.
//
// What was opened must be the aggregator's FIFO (fstat of the descriptor:
// the object written to, whatever the path names by then).
func dialFIFO(u *url.URL, trusted owners) (Conn, int, error) {
	p, err := pathOf(u)
	if err != nil {
		return nil, 0, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, 0, fmt.Errorf("open fifo: %w", err)
	}
	if fi.Mode()&fs.ModeNamedPipe == 0 {
		return nil, 0, fmt.Errorf("open fifo %s: %w: not a FIFO (mode %v)", p, ErrBadURL, fi.Mode())
	}
	fd, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, syscall.ENXIO) {
		return nil, 0, fmt.Errorf("open fifo %s: %w", p, ErrNoReader)
	}
	if err != nil {
		return nil, 0, &fs.PathError{Op: "open fifo", Path: p, Err: err}
	}
	if err := trusted.checkFD(fd, p, "FIFO"); err != nil {
		syscall.Close(fd)
		return nil, 0, err
	}
	return os.NewFile(uintptr(fd), p), 0, nil
}
