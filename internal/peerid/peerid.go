// Package peerid finds the process on the other end of a local connection
// when the kernel does not say: the owner of a loopback TCP or UDP peer
// socket, and the writers of a FIFO. Unix sockets do not need it
// (SO_PEERCRED / SCM_CREDENTIALS, Via "kernel").
//
// # How
//
// TCP and UDP: one exact NETLINK_SOCK_DIAG request (inet_diag, no dump)
// returns the peer socket's inode and owner uid; then /proc/PID/fd/* links
// are read until one is "socket:[INODE]", and the effective uid/gid come
// from /proc/PID/status. FIFOs: /proc/PID/fd/* links that name the FIFO's
// path are confirmed by device+inode, and /proc/PID/fdinfo/FD flags say
// whether the fd was opened for writing. Results carry Via "lookup".
//
// # Cost and budget
//
// The socket diagnostics request costs a few microseconds; the /proc walk
// dominates and grows with the number of open fds on the machine. Every walk
// is bounded by a Budget (time and fds visited) and returns ErrBudget when it
// would cost more, so a busy host degrades to "unknown" instead of slowing
// the listener. Measured on the 2-vCPU development VM, shared and loaded
// (~110 processes, ~610 fds; go test -run x -bench . ./internal/peerid):
//
//	socket diagnostics request alone                 10 µs, 3 allocs
//	TCP lookup, peer among recent owners (hinted)   130 µs, 24 allocs
//	TCP lookup, cold (walk from the highest pid)    490 µs, 42 allocs
//	full walk without a match (worst case)          2.2 ms, 105 allocs
//	UDPCache hit (per datagram)                      93 ns, 0 allocs
//
// Callers: do a TCP lookup once per connection, at accept time, in the
// connection's goroutine; a UDP listener uses a UDPCache (per source address,
// with a TTL) so the walk happens once per sender, not per datagram, and the
// socket is confirmed once per batch with one sock_diag request on a kept
// netlink socket.
//
// # Races
//
// A lookup is a snapshot: a process that exits or passes its socket on
// (fork, SCM_RIGHTS) between the datagram and the walk may be missed or
// misattributed; when several processes share the socket, the first found
// (most recent pid, hints first) is reported. UDPCache confirms, for every
// batch of datagrams, that the socket it found is still the one bound to
// the source address, so a port reused by another socket never inherits
// the previous owner's identity (see UDPCache for what stays a snapshot).
//
// # Concurrency
//
// Lookup functions and UDPCache methods are safe for concurrent use.
package peerid

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/record"
)

var (
	// ErrNotFound means no local process holds the peer's socket (a remote
	// peer, a socket already closed, or one in a process we may not see).
	ErrNotFound = errors.New("peer process not found")
	// ErrBudget means the lookup gave up because it would cost more than
	// its Budget.
	ErrBudget = errors.New("peer lookup over budget")
)

// Budget bounds one lookup. Zero fields mean no bound.
type Budget struct {
	MaxTime time.Duration // wall time for the /proc walk
	MaxFDs  int           // /proc/PID/fd entries read
}

// DefaultBudget is what the listeners use unless configured. A full walk
// of the development VM's /proc (~110 processes, ~600 fds) took 2.2 ms, so
// 10 ms finds any peer on a small host while bounding a large one; the
// lookup runs in the connection's goroutine, never in the accept loop.
var DefaultBudget = Budget{MaxTime: 10 * time.Millisecond, MaxFDs: 20000}

// via is the Peer.Via of every result of this package.
const via = "lookup"

var self = int32(os.Getpid())

// hints remembers the pids that owned recent peer sockets: producers
// reconnect, so their fd tables are read first next time. lastFD holds the
// fd number each one's socket had: a process gets the lowest free number
// for each new socket, so its next socket is looked for around that one
// first (probe): at it and above when it opens connection after
// connection, below it when it closed some (an HTTP client's pool keeps
// two idle connections per host and closes the rest), which costs a few
// readlinks instead of listing a table of thousands of fds.
var hints struct {
	sync.Mutex
	pids   []int32
	lastFD map[int32]int
}

// probeSpan is how many fd numbers on each side of a hinted pid's last
// socket are tried before the full walk.
const probeSpan = 16

const maxHints = 8

func hintList() []int32 {
	hints.Lock()
	defer hints.Unlock()
	return slicesClone(hints.pids)
}

// probe looks for target among the fds around each hinted pid's last
// socket: that number, the ones above it, then the ones below.
func probe(target []byte) (pid int32, fd int, ok bool) {
	hints.Lock()
	type cand struct {
		pid int32
		fd  int
	}
	cands := make([]cand, 0, len(hints.pids))
	for _, p := range hints.pids {
		if f, ok := hints.lastFD[p]; ok {
			cands = append(cands, cand{p, f})
		}
	}
	hints.Unlock()
	var buf [64]byte
	var name [24]byte
	for _, c := range cands {
		// One open tells a live process from one that exited (most
		// hints of one-shot senders), before any readlink.
		dfd, err := unix.Open(procRoot+"/"+strconv.Itoa(int(c.pid))+"/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		for _, f := range probeOrder(c.fd) {
			nz := append(strconv.AppendInt(name[:0], int64(f), 10), 0)
			if n := readlinkat(dfd, &nz[0], buf[:]); n > 0 && string(buf[:n]) == string(target) {
				unix.Close(dfd)
				return c.pid, f, true
			}
		}
		unix.Close(dfd)
	}
	return 0, 0, false
}

// probeOrder is the fd numbers probe tries after last: last itself, the
// probeSpan above it, then the probeSpan below it (down to 0).
func probeOrder(last int) []int {
	fds := make([]int, 0, 2*probeSpan+1)
	for f := last; f <= last+probeSpan; f++ {
		fds = append(fds, f)
	}
	for f := last - 1; f >= 0 && f >= last-probeSpan; f-- {
		fds = append(fds, f)
	}
	return fds
}

func addHint(pid int32, fd int) {
	hints.Lock()
	defer hints.Unlock()
	if hints.lastFD == nil {
		hints.lastFD = map[int32]int{}
	}
	hints.lastFD[pid] = fd
	p := hints.pids
	for i, v := range p {
		if v == pid {
			copy(p[1:i+1], p[:i])
			p[0] = pid
			return
		}
	}
	if len(p) < maxHints {
		p = append(p, 0)
	} else {
		delete(hints.lastFD, p[len(p)-1])
	}
	copy(p[1:], p)
	p[0] = pid
	hints.pids = p
}

func slicesClone(s []int32) []int32 { return append([]int32(nil), s...) }

// LookupTCP finds the process owning the other end of the TCP connection
// whose local (our) address is local and remote (peer) address is remote.
// The returned Peer has HasCreds, PID, UID, GID, Addr (remote) and Via
// "lookup". Errors wrap ErrNotFound or ErrBudget; the Peer then still
// carries Addr.
func LookupTCP(local, remote *net.TCPAddr, b Budget) (record.Peer, error) {
	if local == nil || remote == nil {
		return record.Peer{}, fmt.Errorf("%w: nil address", ErrNotFound)
	}
	l, r := local.AddrPort(), remote.AddrPort()
	return lookupInet(unix.IPPROTO_TCP, l, r, b)
}

// LookupUDP finds the process owning the socket that sent datagrams from
// remote to our socket at local. See LookupTCP for the result.
func LookupUDP(local, remote *net.UDPAddr, b Budget) (record.Peer, error) {
	if local == nil || remote == nil {
		return record.Peer{}, fmt.Errorf("%w: nil address", ErrNotFound)
	}
	return lookupInet(unix.IPPROTO_UDP, local.AddrPort(), remote.AddrPort(), b)
}

// ErrRate means the lookup was skipped: lookups already took their share of
// the CPU this second (see spend).
var ErrRate = errors.New("peer lookups over their CPU share")

// lookupShare bounds the wall time all lookups together take per second:
// a storm of new loopback connections or senders from many processes
// (each a /proc walk) then costs the listeners at most a tenth of a CPU,
// and the rest of the storm is recorded by address only.
const lookupShare = 100 * time.Millisecond

var spent struct {
	sync.Mutex
	second int64         // unix second of the window
	used   time.Duration // lookup time spent in it
}

// spend reports whether a lookup may run now; charge(start) charges its
// time once done. (No closure: a UDP listener asks once per batch.)
func spend() (start time.Time, ok bool) {
	now := time.Now()
	spent.Lock()
	defer spent.Unlock()
	if s := now.Unix(); s != spent.second {
		spent.second, spent.used = s, 0
	}
	return now, spent.used < lookupShare
}

// charge adds the time since start to the lookups' spending.
func charge(start time.Time) {
	d := time.Since(start)
	spent.Lock()
	spent.used += d
	spent.Unlock()
}

func lookupInet(proto uint8, local, remote netip.AddrPort, b Budget) (record.Peer, error) {
	peer := record.Peer{Addr: netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port()).String()}
	start, ok := spend()
	if !ok {
		return peer, fmt.Errorf("%s peer %s: %w", protoName(proto), peer.Addr, ErrRate)
	}
	defer charge(start)
	var si sockInfo
	var err error
	if proto == unix.IPPROTO_TCP {
		// The peer's socket: its local end is our remote end.
		si, err = diagLookup(proto, remote, local)
	} else {
		// udp_diag looks sockets up as the receiver of a datagram from
		// src to dst (the kernel's "swapped" convention): a datagram from
		// our local address to the peer's address reaches the peer's
		// socket, connected or not.
		si, err = diagLookup(proto, local, remote)
	}
	if err != nil {
		return peer, fmt.Errorf("%s peer %s: %w", protoName(proto), peer.Addr, err)
	}
	return ownerOf(si, peer, protoName(proto), b)
}

// ownerOf finds the process holding socket si (probe of hinted processes,
// then a /proc walk within b) and fills peer with its pid, uid and gid.
func ownerOf(si sockInfo, peer record.Peer, proto string, b Budget) (record.Peer, error) {
	target := []byte("socket:[" + strconv.FormatUint(si.inode, 10) + "]")
	pid, fd, ok := probe(target)
	if !ok {
		var name string
		var err error
		pid, name, _, err = scan(b, hintList(), self, false, func(_ int32, _ []byte, link []byte) bool {
			return string(link) == string(target)
		})
		if err != nil {
			return peer, fmt.Errorf("%s peer %s (inode %d): %w", proto, peer.Addr, si.inode, err)
		}
		fd, _ = strconv.Atoi(name)
	}
	addHint(pid, fd)
	uid, gid, err := readCreds(pid)
	if err != nil {
		// The process exited after the walk: the socket's owner uid is
		// still known, but a pid without its gid would be half a claim.
		return peer, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	peer.HasCreds, peer.PID, peer.UID, peer.GID, peer.Via = true, pid, uid, gid, via
	return peer, nil
}

func protoName(p uint8) string {
	if p == unix.IPPROTO_TCP {
		return "tcp"
	}
	return "udp"
}

// FIFOWriters returns the processes other than this one that hold the FIFO
// at path open for writing (O_WRONLY or O_RDWR), each once, with Via
// "lookup". It walks all of /proc within b; on ErrBudget it returns the
// writers found so far along with the error. A writer that opened the FIFO
// through another path (a symlink, a bind mount) is not recognised.
func FIFOWriters(path string, b Budget) ([]record.Peer, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return nil, fmt.Errorf("%s is not a FIFO", path)
	}
	abs, err := absPath(path)
	if err != nil {
		return nil, err
	}
	type hit struct {
		pid int32
		fd  string
	}
	var hits []hit
	_, _, _, err = scan(b, nil, self, true, func(pid int32, fd, link []byte) bool {
		if string(link) == abs {
			hits = append(hits, hit{pid, string(fd)})
		}
		return false // all of them
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return peersOf(hits, st, func(h hit) (int32, string) { return h.pid, h.fd }), fmt.Errorf("fifo writers of %s: %w", path, err)
	}
	return peersOf(hits, st, func(h hit) (int32, string) { return h.pid, h.fd }), nil
}

// peersOf confirms each hit (same device and inode, opened for writing) and
// returns one Peer per pid.
func peersOf[H any](hits []H, st unix.Stat_t, get func(H) (int32, string)) []record.Peer {
	var out []record.Peer
	seen := map[int32]bool{}
	for _, h := range hits {
		pid, fd := get(h)
		if seen[pid] {
			continue
		}
		var fst unix.Stat_t
		if err := unix.Stat(procRoot+"/"+strconv.Itoa(int(pid))+"/fd/"+fd, &fst); err != nil || fst.Dev != st.Dev || fst.Ino != st.Ino {
			continue
		}
		flags, err := fdinfoFlags(pid, fd)
		if err != nil {
			continue
		}
		if acc := flags & unix.O_ACCMODE; acc != unix.O_WRONLY && acc != unix.O_RDWR {
			continue
		}
		uid, gid, err := readCreds(pid)
		if err != nil {
			continue
		}
		seen[pid] = true
		out = append(out, record.Peer{HasCreds: true, PID: pid, UID: uid, GID: gid, Via: via})
	}
	return out
}

// absPath is path as /proc/PID/fd links show it: absolute, symlinks in the
// directory part resolved.
func absPath(path string) (string, error) {
	a, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", path, err)
	}
	p, err := filepath.EvalSymlinks(a)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", path, err)
	}
	return p, nil
}
