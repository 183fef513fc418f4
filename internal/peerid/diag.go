package peerid

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// sockInfo is what socket diagnostics tell about one socket.
type sockInfo struct {
	inode  uint64
	cookie uint64 // the kernel's unique socket id: inode numbers are reused, cookies are not
	uid    uint32
}

const (
	nlmsgHdrLen    = 16
	diagReqLen     = 56 // struct inet_diag_req_v2
	diagMsgMinLen  = 72 // struct inet_diag_msg up to idiag_inode
	diagOffCookie  = 44
	diagOffUID     = 64
	diagOffInode   = 68
	nlmsgTypeError = 2 // NLMSG_ERROR
)

// diagLookup asks the kernel (NETLINK_SOCK_DIAG, exact lookup, no dump) for
// the socket whose local address is sockLocal and whose remote address is
// sockRemote. proto is unix.IPPROTO_TCP or unix.IPPROTO_UDP. For an
// unconnected UDP socket sockRemote is where datagrams would come from.
//
// It tries the address family of the addresses first and then AF_INET6 with
// v4-mapped addresses, because a dual-stack IPv6 socket may carry IPv4
// traffic. It asks on the package's kept socket (lookups).
func diagLookup(proto uint8, sockLocal, sockRemote netip.AddrPort) (sockInfo, error) {
	return lookups.lookup(proto, sockLocal, sockRemote)
}

// keptDiag is a NETLINK_SOCK_DIAG socket kept open between requests:
// opening and closing one costs about half of a request (4.5 µs of 8-12 µs
// here), paid by every accepted loopback connection otherwise. Requests on
// it are serialized; it is opened on first use and reopened after an
// error, so that a late reply cannot answer a later request.
type keptDiag struct {
	mu sync.Mutex
	fd int // -1 until first used
}

// lookups is the kept socket of LookupTCP and LookupUDP.
var lookups = newKeptDiag()

func newKeptDiag() *keptDiag { return &keptDiag{fd: -1} }

func (k *keptDiag) lookup(proto uint8, sockLocal, sockRemote netip.AddrPort) (sockInfo, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fd < 0 {
		fd, err := diagSocket()
		if err != nil {
			return sockInfo{}, err
		}
		k.fd = fd
	}
	si, err := diagLookupFD(k.fd, proto, sockLocal, sockRemote)
	if err != nil && !errors.Is(err, ErrNotFound) {
		unix.Close(k.fd)
		k.fd = -1
	}
	return si, err
}

// close releases the socket; a later lookup opens another.
func (k *keptDiag) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fd >= 0 {
		unix.Close(k.fd)
		k.fd = -1
	}
}

// diagSocket opens a NETLINK_SOCK_DIAG socket.
func diagSocket() (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return -1, fmt.Errorf("netlink sock_diag socket: %w", err)
	}
	// A reply normally comes at once; the timeout only guards against a
	// kernel that never answers.
	tv := unix.Timeval{Usec: 200000}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return fd, nil
}

// diagLookupFD is diagLookup on an open sock_diag socket.
func diagLookupFD(fd int, proto uint8, sockLocal, sockRemote netip.AddrPort) (sockInfo, error) {
	l, r := sockLocal.Addr().Unmap(), sockRemote.Addr().Unmap()
	var firstErr error
	if l.Is4() && r.Is4() {
		si, err := diagOne(fd, unix.AF_INET, proto, l, sockLocal.Port(), r, sockRemote.Port())
		if err == nil {
			return si, nil
		}
		firstErr = err
		l, r = netip.AddrFrom16(l.As16()), netip.AddrFrom16(r.As16())
	}
	si, err := diagOne(fd, unix.AF_INET6, proto, l, sockLocal.Port(), r, sockRemote.Port())
	if err != nil && firstErr != nil && !errors.Is(firstErr, ErrNotFound) {
		err = firstErr
	}
	return si, err
}

// diagSeq numbers requests, so a reply is matched to its request.
var diagSeq atomic.Uint32

func diagOne(fd int, family, proto uint8, src netip.Addr, sport uint16, dst netip.Addr, dport uint16) (sockInfo, error) {
	var req [nlmsgHdrLen + diagReqLen]byte
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	seq := diagSeq.Add(1)
	ne.PutUint32(req[8:], seq)
	b := req[nlmsgHdrLen:]
	b[0] = family
	b[1] = proto
	ne.PutUint32(b[4:], ^uint32(0)) // all states
	id := b[8:]
	binary.BigEndian.PutUint16(id[0:], sport)
	binary.BigEndian.PutUint16(id[2:], dport)
	putAddr(id[4:20], src)
	putAddr(id[20:36], dst)
	ne.PutUint32(id[40:], ^uint32(0)) // INET_DIAG_NOCOOKIE
	ne.PutUint32(id[44:], ^uint32(0))

	// write and read, not sendto and recvfrom: an unconnected netlink
	// socket sends to the kernel by default, and no sockaddr is allocated
	// (UDPCache makes this request once per batch of datagrams).
	for {
		_, err := unix.Write(fd, req[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return sockInfo{}, fmt.Errorf("sock_diag request: %w", err)
		}
		break
	}
	var buf [1024]byte
	for {
		n, err := unix.Read(fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return sockInfo{}, fmt.Errorf("sock_diag reply: %w", err)
		}
		if n >= nlmsgHdrLen && ne.Uint32(buf[8:]) != seq {
			continue // a late reply to an earlier request on a kept socket
		}
		return parseDiagReply(buf[:n])
	}
}

func putAddr(dst []byte, a netip.Addr) {
	if a.Is4() {
		v := a.As4()
		copy(dst, v[:])
		return
	}
	v := a.As16()
	copy(dst, v[:])
}

func parseDiagReply(p []byte) (sockInfo, error) {
	ne := binary.NativeEndian
	for len(p) >= nlmsgHdrLen {
		l := int(ne.Uint32(p[0:]))
		typ := ne.Uint16(p[4:])
		if l < nlmsgHdrLen || l > len(p) {
			return sockInfo{}, errors.New("sock_diag: malformed reply")
		}
		body := p[nlmsgHdrLen:l]
		switch typ {
		case nlmsgTypeError:
			if len(body) >= 4 {
				if errno := int32(ne.Uint32(body)); errno != 0 {
					e := unix.Errno(-errno)
					if e == unix.ENOENT {
						return sockInfo{}, ErrNotFound
					}
					return sockInfo{}, fmt.Errorf("sock_diag: %w", e)
				}
			}
		case unix.SOCK_DIAG_BY_FAMILY:
			if len(body) < diagMsgMinLen {
				return sockInfo{}, errors.New("sock_diag: short inet_diag_msg")
			}
			si := sockInfo{uid: ne.Uint32(body[diagOffUID:]), inode: uint64(ne.Uint32(body[diagOffInode:])),
				cookie: uint64(ne.Uint32(body[diagOffCookie:])) | uint64(ne.Uint32(body[diagOffCookie+4:]))<<32}
			if si.inode == 0 { // e.g. a TIME_WAIT socket: no process holds it
				return sockInfo{}, ErrNotFound
			}
			return si, nil
		}
		l = (l + 3) &^ 3
		if l > len(p) {
			break
		}
		p = p[l:]
	}
	return sockInfo{}, ErrNotFound
}
