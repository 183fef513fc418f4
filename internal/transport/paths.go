package transport

// Shared names: every listener bound to a filesystem path (unix, unixgram,
// fifo, the shm control socket) or to a global name (a POSIX queue) goes
// through this file, so one set of rules decides who may take an address.
//
//   - One instance per address: a lock file (flock) beside the path,
//     PATH.lock, or for a queue LockDir()/mq.NAME.lock. A second instance
//     fails at start-up with ErrInUse naming the holder's pid (written
//     into the lock file) and touches nothing. A killed holder's lock is
//     released by the kernel, so taking the lock is the staleness test.
//   - Never another user's file: a lock file, socket or FIFO owned by
//     another uid is never removed or reused; start-up fails with
//     ErrForeign naming the path, owner and mode. Lock files are opened
//     with O_NOFOLLOW and must be regular files of ours.
//   - Exact modes: a socket is created with its mode already no wider
//     than configured (fchmod on the socket before bind, which Linux uses
//     for the file bind creates, masked by the umask), then chmod/chown'ed
//     to exactly the configured mode and group through an O_PATH descriptor
//     of the file, after checking it is the socket we bound. FIFOs and
//     queues are fchmod/fchown'ed through their own descriptors.
//   - Removal only of what we created: Release removes the file only while
//     it is still the inode we created, and only while we hold the lock.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

var (
	// ErrInUse means another live process holds the address's lock.
	ErrInUse = errors.New("address in use by another instance")
	// ErrForeign means a file or queue at the address belongs to another
	// user, or is more widely accessible than configured; it is left alone.
	ErrForeign = errors.New("address held by another user")
)

// Lock is an exclusive flock on a lock file, with the holder's pid in it.
type Lock struct {
	path string
	f    *os.File
	once sync.Once
}

// maxLockAttempts bounds the retries when the lock file is replaced while
// we open it (a previous holder unlinking it on exit).
const maxLockAttempts = 16

// AcquireLock takes the lock file at path, creating it (mode 0600: other
// users cannot open it, so they cannot hold our lock either). It fails
// with ErrInUse when a live process holds it (the error names its pid),
// and with ErrForeign when path is a symbolic link, not a regular file, or
// owned by another user. A lock file left by a killed process is taken
// over: the kernel released its flock.
func AcquireLock(path string) (*Lock, error) {
	for range maxLockAttempts {
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
		if err != nil {
			if errors.Is(err, unix.ELOOP) {
				return nil, fmt.Errorf("%w: lock file %s is a symbolic link (%s); not followed", ErrForeign, path, describe(path))
			}
			if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
				return nil, fmt.Errorf("%w: cannot open lock file %s (%s): %w", ErrForeign, path, describe(path), err)
			}
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
				return nil, fmt.Errorf("%w: lock file %s: %w", ErrBadAddress, path, err)
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		f := os.NewFile(uintptr(fd), path)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() {
			f.Close()
			return nil, fmt.Errorf("%w: lock file %s is %s; not ours, left alone", ErrForeign, path, describeStat(&st))
		}
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			holder := readPID(f)
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("%w: held by pid %s (lock file %s)", ErrInUse, holder, path)
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		// The previous holder may have unlinked the file between our open
		// and our flock; a lock on an unlinked inode excludes nobody.
		var now unix.Stat_t
		if err := unix.Lstat(path, &now); err != nil || now.Dev != st.Dev || now.Ino != st.Ino {
			f.Close()
			continue
		}
		// The pid only names the holder in a refused instance's message;
		// the lock holds whether or not it could be written.
		if f.Truncate(0) == nil {
			_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		return &Lock{path: path, f: f}, nil
	}
	return nil, fmt.Errorf("%w: lock file %s keeps being replaced", ErrInUse, path)
}

func readPID(f *os.File) string {
	var b [32]byte
	n, _ := f.ReadAt(b[:], 0)
	if s := strings.TrimSpace(string(b[:n])); s != "" {
		return s
	}
	return "unknown"
}

// Path is the lock file's path.
func (l *Lock) Path() string { return l.path }

// Release unlinks the lock file and drops the lock (in that order, so a
// process waiting to open it either finds our inode still locked or, once
// it has the lock, sees that the path no longer names it and retries).
// Safe to call more than once.
func (l *Lock) Release() {
	if l == nil {
		return
	}
	l.once.Do(func() {
		var st, now unix.Stat_t
		if unix.Fstat(int(l.f.Fd()), &st) == nil && unix.Lstat(l.path, &now) == nil && st.Dev == now.Dev && st.Ino == now.Ino {
			_ = os.Remove(l.path)
		}
		l.f.Close()
	})
}

// LockDir is where locks for addresses that are not paths (POSIX queue
// names, which are global) live: /run/logagg for root, /tmp/logagg-UID
// for other users. It depends on the uid alone, never on the environment,
// so two instances of one user always meet at the same lock. It is created
// if missing (0755 for root, 0700 otherwise) and must be a directory of
// ours that no one else can write.
func LockDir() (string, error) {
	uid := os.Geteuid()
	dir, mode := "/run/logagg", uint32(0o755)
	if uid != 0 {
		dir, mode = "/tmp/logagg-"+strconv.Itoa(uid), 0o700
	}
	if err := unix.Mkdir(dir, mode); err != nil && !errors.Is(err, unix.EEXIST) {
		return "", fmt.Errorf("lock directory %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return "", fmt.Errorf("lock directory %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != uid || st.Mode&0o022 != 0 {
		return "", fmt.Errorf("%w: lock directory %s is %s; want a directory of uid %d that only it can write", ErrForeign, dir, describeStat(&st), uid)
	}
	return dir, nil
}

// Node is the kind of file a Claim creates.
type Node int

const (
	NodeSocket Node = iota // unix stream or datagram socket
	NodeFIFO               // named pipe
)

// Claim is this process's hold on a filesystem path: the lock beside it
// and, once bound, the identity of the file we created there.
type Claim struct {
	Path string
	lock *Lock
	kind Node
	// abstract: a Linux abstract socket name ("@name"): no file, so no
	// lock, no mode and nothing to remove; the kernel refuses a second
	// bind of the name (EADDRINUSE) by itself.
	abstract bool

	mu       sync.Mutex
	id       fileID // of the file we created
	created  bool
	released bool
}

// fileID tells a file from a later one at the same path. Inode numbers are
// reused at once after a removal, so the type and the birth time count too
// (not the change time: writes to a FIFO change it). A filesystem that
// does not report birth times leaves it zero.
type fileID struct {
	dev, ino uint64
	mode     uint32
	btime    unix.StatxTimestamp
}

// statID identifies the file at path (fd < 0) or open as fd (path "").
func statID(fd int, path string) (fileID, error) {
	var stx unix.Statx_t
	var err error
	if fd >= 0 {
		err = unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_TYPE|unix.STATX_INO|unix.STATX_BTIME, &stx)
	} else {
		err = unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_TYPE|unix.STATX_INO|unix.STATX_BTIME, &stx)
	}
	if err != nil {
		return fileID{}, err
	}
	id := fileID{dev: unix.Mkdev(stx.Dev_major, stx.Dev_minor), ino: stx.Ino, mode: uint32(stx.Mode) & unix.S_IFMT}
	if stx.Mask&unix.STATX_BTIME != 0 {
		id.btime = stx.Btime
	}
	return id, nil
}

// ClaimPath locks PATH.lock and readies path for a new socket or FIFO: a
// stale one of ours is removed (we hold the lock, so no instance of ours
// serves it); anything else is left alone and reported: a socket or FIFO
// of another user wraps ErrForeign, a regular file, directory or other
// kind wraps ErrNotSocket, each naming the owner and mode.
func ClaimPath(path string, kind Node) (*Claim, error) {
	if strings.HasPrefix(path, "@") {
		if kind != NodeSocket {
			return nil, fmt.Errorf("%w: %s: only sockets have abstract names", ErrBadAddress, path)
		}
		return &Claim{Path: path, kind: kind, abstract: true}, nil
	}
	lock, err := AcquireLock(path + ".lock")
	if err != nil {
		return nil, err
	}
	c := &Claim{Path: path, lock: lock, kind: kind}
	if err := c.clear(); err != nil {
		lock.Release()
		return nil, err
	}
	return c, nil
}

func (c *Claim) clear() error {
	var st unix.Stat_t
	err := unix.Lstat(c.Path, &st)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat %s: %w", c.Path, err)
	}
	t := st.Mode & unix.S_IFMT
	if t != unix.S_IFSOCK && !(c.kind == NodeFIFO && t == unix.S_IFIFO) {
		return fmt.Errorf("%w: %s is %s; left untouched", ErrNotSocket, c.Path, describeStat(&st))
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: %s is %s; another user's file is never removed (remove it, or listen elsewhere)", ErrForeign, c.Path, describeStat(&st))
	}
	if err := os.Remove(c.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale %s: %w", c.Path, err)
	}
	return nil
}

// ListenUnix creates the unix stream socket at the claimed path with o's
// mode and group, exactly (see listen).
func (c *Claim) ListenUnix(o Options) (*net.UnixListener, error) {
	ln, err := c.listen("unix", o)
	if err != nil {
		return nil, err
	}
	ul := ln.(*net.UnixListener)
	if c.abstract {
		return ul, nil
	}
	// Release removes the file, and only while it is still ours.
	ul.SetUnlinkOnClose(false)
	if err := c.adopt(o); err != nil {
		ul.Close()
		return nil, err
	}
	return ul, nil
}

// ListenUnixgram creates the unix datagram socket at the claimed path with
// o's mode and group, exactly (see listen).
func (c *Claim) ListenUnixgram(o Options) (*net.UnixConn, error) {
	v, err := c.listen("unixgram", o)
	if err != nil {
		return nil, err
	}
	uc := v.(*net.UnixConn)
	if c.abstract {
		return uc, nil
	}
	if err := c.adopt(o); err != nil {
		uc.Close()
		return nil, err
	}
	return uc, nil
}

// listen binds network at the claimed path. The socket's own mode is set
// before bind: Linux creates the file with it (less the umask), so the file
// is never more open than configured, not even between bind and chmod.
func (c *Claim) listen(network string, o Options) (io.Closer, error) {
	perm := socketPerm(o)
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) { err = unix.Fchmod(int(fd), perm) }); cerr != nil {
			return cerr
		}
		return err
	}}
	var (
		v   io.Closer
		err error
	)
	if network == "unixgram" {
		v, err = lc.ListenPacket(context.Background(), network, c.Path)
	} else {
		v, err = lc.Listen(context.Background(), network, c.Path)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: listen %s %s: %w", ErrBadAddress, network, c.Path, err)
	}
	if !c.abstract {
		c.noteCreated()
	}
	return v, nil
}

// noteCreated records the identity of the file just created at the path,
// so Release removes that file and no other.
func (c *Claim) noteCreated() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id, err := statID(-1, c.Path); err == nil {
		c.id, c.created = id, true
	}
}

// MakeFIFO creates the FIFO at the claimed path and opens it
// O_RDWR|O_NONBLOCK (see package fifo); the mode and group are set exactly
// through the descriptor, after checking it is the FIFO we created.
func (c *Claim) MakeFIFO(o Options) (int, error) {
	if err := unix.Mkfifo(c.Path, 0o600); err != nil {
		return -1, fmt.Errorf("%w: mkfifo %s: %w", ErrBadAddress, c.Path, err)
	}
	c.noteCreated()
	fd, err := unix.Open(c.Path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open fifo %s: %w", c.Path, err)
	}
	if err := c.own(fd, o, false); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// adopt records the socket file bind created and applies the exact mode and
// group through an O_PATH descriptor of it (fchmod on the socket itself
// does not reach the file once bound).
func (c *Claim) adopt(o Options) error {
	fd, err := unix.Open(c.Path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s after bind: %w", c.Path, err)
	}
	defer unix.Close(fd)
	return c.own(fd, o, true)
}

// own checks that fd is the node we created (right type, our uid), notes its
// identity for Release and sets mode and group.
func (c *Claim) own(fd int, o Options, opath bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", c.Path, err)
	}
	want := uint32(unix.S_IFSOCK)
	if c.kind == NodeFIFO {
		want = unix.S_IFIFO
	}
	id, err := statID(fd, "")
	if err != nil {
		return fmt.Errorf("stat %s: %w", c.Path, err)
	}
	c.mu.Lock()
	same := c.created && id == c.id
	c.mu.Unlock()
	if !same || st.Mode&unix.S_IFMT != want || int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: %s is %s, not what we created: replaced by someone else", ErrForeign, c.Path, describeStat(&st))
	}
	if o.SocketGID >= 0 {
		if opath {
			err = unix.Fchownat(fd, "", -1, o.SocketGID, unix.AT_EMPTY_PATH)
		} else {
			err = unix.Fchown(fd, -1, o.SocketGID)
		}
		if err != nil {
			return fmt.Errorf("chown %s to gid %d: %w", c.Path, o.SocketGID, err)
		}
	}
	perm := socketPerm(o)
	if opath {
		// chmod through the descriptor's /proc link reaches exactly the
		// inode we checked, whatever happens to the path meanwhile.
		err = unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), perm)
	} else {
		err = unix.Fchmod(fd, perm)
	}
	if err != nil {
		return fmt.Errorf("chmod %s to %#o: %w", c.Path, perm, err)
	}
	return nil
}

// socketPerm is the configured permission bits (0660 when unset).
func socketPerm(o Options) uint32 {
	if p := uint32(o.SocketMode.Perm()); p != 0 {
		return p
	}
	return 0o660
}

// Release removes the file we created, if the path still names it, then
// drops the lock. Safe to call more than once and on nil.
func (c *Claim) Release() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released {
		return
	}
	c.released = true
	if c.created && !c.abstract {
		if id, err := statID(-1, c.Path); err == nil && id == c.id {
			_ = os.Remove(c.Path)
		}
	}
	c.lock.Release()
}

// CheckOwned is the rule for an existing object we did not create (a POSIX
// queue left by a previous run): it must belong to our uid, grant no
// permission beyond the configured mode, and, where it grants its group
// anything, belong to the configured group. It returns an error wrapping
// ErrForeign naming what, owner and mode otherwise.
func CheckOwned(what string, st *unix.Stat_t, o Options) error {
	perm := socketPerm(o)
	switch {
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%w: %s exists and is %s; another user's, never reused (a squatter could read every record)", ErrForeign, what, describeStat(st))
	case st.Mode&0o777&^perm != 0:
		return fmt.Errorf("%w: %s exists and is %s, wider than the configured %#o; not reused (remove it or fix its mode)", ErrForeign, what, describeStat(st), perm)
	case o.SocketGID >= 0 && st.Mode&0o070 != 0 && int(st.Gid) != o.SocketGID:
		return fmt.Errorf("%w: %s exists and is %s, open to group %s instead of the configured %s; not reused", ErrForeign, what, describeStat(st), groupName(st.Gid), groupName(uint32(o.SocketGID)))
	}
	return nil
}

// ApplyPerms sets the configured mode and group on an object through its
// descriptor (a FIFO, a queue), whatever the umask did to it.
func ApplyPerms(fd int, what string, o Options) error {
	if o.SocketGID >= 0 {
		if err := unix.Fchown(fd, -1, o.SocketGID); err != nil {
			return fmt.Errorf("chown %s to gid %d: %w", what, o.SocketGID, err)
		}
	}
	if err := unix.Fchmod(fd, socketPerm(o)); err != nil {
		return fmt.Errorf("chmod %s: %w", what, err)
	}
	return nil
}

// describe says what path is, for error messages ("missing" if it is not).
func describe(path string) string {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return "cannot stat: " + err.Error()
	}
	return describeStat(&st)
}

// describeStat renders type, owner and mode: "a socket owned by nobody
// (uid 65534), mode srw-rw-rw-".
func describeStat(st *unix.Stat_t) string {
	kind := "a file of another kind"
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFSOCK:
		kind = "a socket"
	case unix.S_IFIFO:
		kind = "a FIFO"
	case unix.S_IFREG:
		kind = "a regular file"
	case unix.S_IFDIR:
		kind = "a directory"
	case unix.S_IFLNK:
		kind = "a symbolic link"
	}
	return fmt.Sprintf("%s owned by %s, group %s, mode %s", kind, userName(st.Uid), groupName(st.Gid), fileMode(st))
}

func fileMode(st *unix.Stat_t) string {
	m := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	}
	return fmt.Sprintf("%s (%#o)", m, st.Mode&0o7777)
}

func userName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil {
		return u.Username + " (uid " + id + ")"
	}
	return "uid " + id
}

func groupName(gid uint32) string {
	id := strconv.FormatUint(uint64(gid), 10)
	if g, err := user.LookupGroupId(id); err == nil {
		return g.Name + " (gid " + id + ")"
	}
	return "gid " + id
}

// lockPathFor is the lock file of a name that is not a path (kind "mq").
func lockPathFor(kind, name string) (string, error) {
	dir, err := LockDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, kind+"."+strings.TrimPrefix(name, "/")+".lock"), nil
}

// LockName takes the lock of a global name (kind "mq", name "/logagg") in
// LockDir.
func LockName(kind, name string) (*Lock, error) {
	p, err := lockPathFor(kind, name)
	if err != nil {
		return nil, err
	}
	return AcquireLock(p)
}
