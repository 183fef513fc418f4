package client

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrUntrusted is returned (wrapped, in a DialError) when the socket, FIFO
// or queue at the address, or the process serving a socket, belongs to a
// user the aggregator does not run as: in a shared directory such as /tmp,
// or for a POSIX queue name, which is global, any local user can create
// the address first and read every record written to it. The aggregator
// makes the same check from its side and refuses to serve another user's
// address; see WithAggregatorUID.
var ErrUntrusted = errors.New("not the aggregator's")

// WithAggregatorUID names the users the aggregator may run as: a socket,
// FIFO or queue the Writer writes to must belong to one of them (and, for
// unix stream sockets and shm, so must the process serving it). By
// default the aggregator runs as root, as this process's own user, or as
// the user "logagg" the package creates for the service; uids given here
// are trusted as well. TCP and UDP carry no owner and are not checked.
func WithAggregatorUID(uids ...int) Option {
	return func(c *config) {
		for _, u := range uids {
			if u >= 0 {
				c.trusted = append(c.trusted, uint32(u))
			}
		}
	}
}

// ServiceUser is the user the packaged service runs as (docs/service.md),
// trusted by default where it exists.
const ServiceUser = "logagg"

// defaultTrusted is root, this process's effective user and, where it
// exists, the service's user.
func defaultTrusted() owners {
	t := owners{0, uint32(os.Geteuid())}
	if u, err := user.Lookup(ServiceUser); err == nil {
		if id, err := strconv.ParseUint(u.Uid, 10, 32); err == nil {
			t = append(t, uint32(id))
		}
	}
	return t
}

// owners are the uids the aggregator may run as: what a Writer writes to
// must belong to one of them.
type owners []uint32

// checkSocket checks a connected unix stream socket: the file at path
// (none for an abstract "@name"), then the process that listens on it, by
// the kernel's SO_PEERCRED, which no file can fake.
func (o owners) checkSocket(path string, c *net.UnixConn) error {
	if !strings.HasPrefix(path, "@") {
		if err := o.checkPath(path, "socket"); err != nil {
			return err
		}
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("%s: peer credentials: %w", path, os.NewSyscallError("getsockopt", cerr))
	}
	if !slices.Contains(o, cred.Uid) {
		return fmt.Errorf("%w: %s is served by pid %d of %s; the aggregator runs as %s: refusing to write to another user's process (trust a user with WithAggregatorUID, producer --aggregator-user)",
			ErrUntrusted, path, cred.Pid, userName(cred.Uid), o)
	}
	return nil
}

// checkPath checks the owner of the file at path (lstat) and, when it is
// a symbolic link, of what it points to too: /dev/log is often root's
// link to the socket.
func (o owners) checkPath(path, kind string) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	if err := o.checkStat(path, kind, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		if err := unix.Stat(path, &st); err != nil {
			return &fs.PathError{Op: "stat", Path: path, Err: err}
		}
		return o.checkStat(path, kind, &st)
	}
	return nil
}

// checkFD checks the owner of an open descriptor: the object itself,
// whatever its name names by now.
func (o owners) checkFD(fd int, what, kind string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s: %w", what, os.NewSyscallError("fstat", err))
	}
	return o.checkStat(what, kind, &st)
}

func (o owners) checkStat(what, kind string, st *unix.Stat_t) error {
	if slices.Contains(o, st.Uid) {
		return nil
	}
	return fmt.Errorf("%w: %s is owned by %s (mode %v); the aggregator runs as %s: refusing to write to another user's %s (trust a user with WithAggregatorUID, producer --aggregator-user)",
		ErrUntrusted, what, userName(st.Uid), fileMode(st), o, kind)
}

// String names the users: "root (uid 0) or alice (uid 1000)".
func (o owners) String() string {
	var names []string
	for _, uid := range o {
		if n := userName(uid); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return strings.Join(names, " or ")
}

func fileMode(st *unix.Stat_t) fs.FileMode {
	m := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFDIR:
		m |= fs.ModeDir
	}
	return m
}

func userName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil {
		return u.Username + " (uid " + id + ")"
	}
	return "uid " + id
}

// ParseUsers reads a comma-separated list of user names and uids (the
// producer's --aggregator-user) into uids for WithAggregatorUID.
func ParseUsers(list string) ([]int, error) {
	var uids []int
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if id, err := strconv.ParseUint(s, 10, 32); err == nil {
			uids = append(uids, int(id))
			continue
		}
		u, err := user.Lookup(s)
		if err != nil {
			return nil, fmt.Errorf("aggregator user %q: %w", s, err)
		}
		id, err := strconv.Atoi(u.Uid)
		if err != nil {
			return nil, fmt.Errorf("aggregator user %q: uid %q: %w", s, u.Uid, err)
		}
		uids = append(uids, id)
	}
	return uids, nil
}
