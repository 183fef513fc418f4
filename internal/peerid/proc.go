package peerid

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// procRoot is where process information is read; tests never change it, but
// keeping it in one place documents the dependency.
const procRoot = "/proc"

// scan walks /proc/PID/fd of every process (the pids in hint first, then
// the others from the highest pid down, since a log producer that just
// connected is more often a young process) and calls match with each fd's
// link target. It stops at the first match and returns its pid and fd name
// (the number as text). It gives up with ErrBudget when b is exhausted.
//
// match gets the link target in a buffer that is reused; it must not keep it.
func scan(b Budget, hint []int32, self int32, skipSelf bool, match func(pid int32, fd []byte, link []byte) bool) (pid int32, fdName string, visited int, err error) {
	start := time.Now()
	deadline := start.Add(b.MaxTime)
	procfd, err := unix.Open(procRoot, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, "", 0, fmt.Errorf("open %s: %w", procRoot, err)
	}
	defer unix.Close(procfd)

	dbuf := make([]byte, 16<<10)
	var lbuf [256]byte
	var pathBuf [32]byte
	// visit scans p's fds; done says the walk ends (a match, or the budget).
	visit := func(p int32) (done bool, name string, err error) {
		if skipSelf && p == self {
			return false, "", nil
		}
		if b.MaxTime > 0 && time.Now().After(deadline) {
			return true, "", fmt.Errorf("%w: %v spent, %d fds visited", ErrBudget, time.Since(start).Round(time.Microsecond), visited)
		}
		path := strconv.AppendInt(pathBuf[:0], int64(p), 10)
		path = append(path, "/fd"...)
		dfd, err := unix.Openat(procfd, string(path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return false, "", nil // the process exited, or we may not look at it
		}
		found, name, n, berr := scanFDDir(dfd, dbuf, lbuf[:], b, visited, deadline, func(fd, link []byte) bool { return match(p, fd, link) })
		unix.Close(dfd)
		visited = n
		if found {
			return true, name, nil
		}
		if berr != nil {
			return true, "", fmt.Errorf("%w: %v spent, %d fds visited", berr, time.Since(start).Round(time.Microsecond), visited)
		}
		return false, "", nil
	}
	// The hinted pids first, before /proc is listed: a client that
	// connects again (a logger run every minute, an SDK whose HTTP client
	// opens connections past its idle ones) is found without the listing.
	for _, h := range hint {
		if done, name, err := visit(h); done {
			if err != nil {
				return 0, "", visited, err
			}
			return h, name, visited, nil
		}
	}
	pids, err := listPids(procfd)
	if err != nil {
		return 0, "", visited, err
	}
	slices.SortFunc(pids, func(a, b int32) int { return int(b) - int(a) })
	for _, p := range pids {
		if slices.Contains(hint, p) {
			continue // visited above
		}
		if done, name, err := visit(p); done {
			if err != nil {
				return 0, "", visited, err
			}
			return p, name, visited, nil
		}
	}
	return 0, "", visited, ErrNotFound
}

// scanFDDir reads the entries of one /proc/PID/fd directory with getdents64
// and then readlinkat, from the highest fd down, without allocating per
// entry. The socket of a connection that was just made is usually the
// process's highest fd, so a producer holding thousands of connections is
// matched in one readlink instead of thousands (the kernel lists fds in
// ascending order).
func scanFDDir(dfd int, dbuf, lbuf []byte, b Budget, visited int, deadline time.Time, match func(fd, link []byte) bool) (bool, string, int, error) {
	var names []byte // NUL-terminated fd names, in the kernel's order
	var offs []int32 // start of each name in names
	for {
		n, err := unix.Getdents(dfd, dbuf)
		if err != nil || n <= 0 {
			break
		}
		p := dbuf[:n]
		for len(p) >= 19 {
			reclen := int(binary.NativeEndian.Uint16(p[16:]))
			if reclen < 19 || reclen > len(p) {
				break
			}
			nameZ := p[19:reclen] // NUL-terminated, padded
			p = p[reclen:]
			end := bytes.IndexByte(nameZ, 0)
			if end <= 0 || nameZ[0] == '.' {
				continue
			}
			offs = append(offs, int32(len(names)))
			names = append(names, nameZ[:end+1]...)
		}
	}
	for i := len(offs) - 1; i >= 0; i-- {
		nameZ := names[offs[i]:]
		name := nameZ[:bytes.IndexByte(nameZ, 0)]
		visited++
		if b.MaxFDs > 0 && visited > b.MaxFDs {
			return false, "", visited, ErrBudget
		}
		if b.MaxTime > 0 && visited&63 == 0 && time.Now().After(deadline) {
			return false, "", visited, ErrBudget
		}
		ln := readlinkat(dfd, &nameZ[0], lbuf)
		if ln <= 0 {
			continue
		}
		if match(name, lbuf[:ln]) {
			return true, string(name), visited, nil
		}
	}
	return false, "", visited, nil
}

// readlinkat calls readlinkat(2) with a NUL-terminated name already in a
// buffer, so no string is allocated per fd.
func readlinkat(dirfd int, name *byte, buf []byte) int {
	r, _, e := syscall.Syscall6(unix.SYS_READLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(name)),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
	if e != 0 {
		return -1
	}
	return int(r)
}

// listPids returns the numeric entries of /proc.
func listPids(procfd int) ([]int32, error) {
	buf := make([]byte, 32<<10)
	pids := make([]int32, 0, 512)
	if _, err := unix.Seek(procfd, 0, 0); err != nil {
		return nil, fmt.Errorf("seek %s: %w", procRoot, err)
	}
	for {
		n, err := unix.Getdents(procfd, buf)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", procRoot, err)
		}
		if n <= 0 {
			return pids, nil
		}
		p := buf[:n]
		for len(p) >= 19 {
			reclen := int(binary.NativeEndian.Uint16(p[16:]))
			if reclen < 19 || reclen > len(p) {
				break
			}
			name := p[19:reclen]
			p = p[reclen:]
			v, ok := parsePid(name)
			if ok {
				pids = append(pids, v)
			}
		}
	}
}

func parsePid(nameZ []byte) (int32, bool) {
	var v int64
	i := 0
	for ; i < len(nameZ) && nameZ[i] != 0; i++ {
		c := nameZ[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
		if v > 1<<31-1 {
			return 0, false
		}
	}
	return int32(v), i > 0
}

// readCreds returns the effective uid and gid of pid (the ids SO_PEERCRED
// reports, so both ways of knowing agree) as the owner of /proc/PID. The
// kernel gives every process's own directory its effective ids whether or
// not the process is dumpable (task_dump_owner: only the files and
// directories under it go to root for a process that is not), and
// refreshes them on every lookup of the path. procps reads them the same
// way, since /proc/PID/status, which also has them, costs ten times as
// much to produce (11 µs against 1 µs here, for every accepted loopback
// connection).
func readCreds(pid int32) (uid, gid uint32, err error) {
	var st unix.Stat_t
	if err := unix.Stat(procRoot+"/"+strconv.Itoa(int(pid)), &st); err != nil {
		return 0, 0, fmt.Errorf("stat %s/%d: %w", procRoot, pid, err)
	}
	return st.Uid, st.Gid, nil
}

// fdinfoFlags reads the open flags of fd of pid from /proc/PID/fdinfo/FD
// ("flags:\t0100001", octal).
func fdinfoFlags(pid int32, fd string) (int, error) {
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(int(pid)) + "/fdinfo/" + fd)
	if err != nil {
		return 0, err
	}
	i := bytes.Index(b, []byte("flags:"))
	if i < 0 {
		return 0, fmt.Errorf("fdinfo %d/%s: no flags", pid, fd)
	}
	line := b[i+len("flags:"):]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	v, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 8, 32)
	if err != nil {
		return 0, fmt.Errorf("fdinfo %d/%s: %w", pid, fd, err)
	}
	return int(v), nil
}
