package rtt

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/bench/rawchan"
)

// Mechanism names accepted by Options.Mechanisms.
const (
	MechPipeInproc = "pipe-inproc" // one thread writes then reads one pipe (seed 004's pipe.cpp)
	MechPipe       = "pipe"        // two pipes to a child process (seed 004's pipe_fork.cpp)
	MechFIFO       = "fifo"        // two named pipes
	MechUnixSock   = "unixsock"    // unix stream socketpair (seed 001's bench4)
	MechUnixgram   = "unixgram"    // unix datagram socketpair
	MechTCP        = "tcp"         // loopback TCP, TCP_NODELAY
	MechUDP        = "udp"         // loopback UDP, connected
	MechMQ         = "mq"          // POSIX message queues (seed 001's bench3)
	MechShmSpin    = "shm-spin"    // shared memory, both sides spin (seed 001's bench)
	MechShmFutex   = "shm-futex"   // shared memory, short spin then FUTEX_WAIT
	// Seed 001's bench2, "single core based message passing with
	// serialized execution", three ways (see threads.go for why):
	MechShm1CoreThreads = "shm-1core-threads" // two threads of this process on one CPU, sched_yield hand-off
	MechShm1CoreProcs   = "shm-1core-procs"   // two processes on one CPU, sched_yield hand-off
	MechShmSerial       = "shm-serial"        // one thread plays both sides in turn: no hand-off at all
)

// AllMechanisms lists every mechanism in the order rows are reported.
var AllMechanisms = []string{MechPipeInproc, MechPipe, MechFIFO, MechUnixSock, MechUnixgram,
	MechTCP, MechUDP, MechMQ, MechShmSpin, MechShmFutex, MechShm1CoreThreads, MechShm1CoreProcs, MechShmSerial}

// ErrUnknownMechanism is returned (wrapped) for a name not in AllMechanisms.
var ErrUnknownMechanism = errors.New("unknown mechanism")

// channel is what the measuring side needs for one row: its own conn, the
// descriptors the child inherits (as fds 4, 5, ...), extra child arguments,
// and hooks.
type channel struct {
	parent     conn
	childFiles []*os.File
	childArgs  []string
	afterReady func() error // runs once the child reported ready
	unblock    func()       // the child died: make a blocked parent call return
	cleanup    func()
}

func newFile(fd int, name string) *os.File { return os.NewFile(uintptr(fd), name) }

// setup creates the channel for mech on the measuring side.
func setup(mech string, size int, abort *atomic.Bool, raw bool) (*channel, error) {
	ch := &channel{unblock: func() {}, cleanup: func() {}}
	switch mech {
	case MechPipe:
		var p2c, c2p [2]int
		if err := unix.Pipe2(p2c[:], unix.O_CLOEXEC); err != nil {
			return nil, fmt.Errorf("pipe: %w", err)
		}
		if err := unix.Pipe2(c2p[:], unix.O_CLOEXEC); err != nil {
			unix.Close(p2c[0])
			unix.Close(p2c[1])
			return nil, fmt.Errorf("pipe: %w", err)
		}
		ch.parent = &streamConn{r: c2p[0], w: p2c[1], raw: raw}
		ch.childFiles = []*os.File{newFile(p2c[0], "p2c"), newFile(c2p[1], "c2p")}
	case MechFIFO:
		dir, err := os.MkdirTemp("", "ipcbench-fifo")
		if err != nil {
			return nil, err
		}
		in, out := filepath.Join(dir, "p2c"), filepath.Join(dir, "c2p")
		ch.cleanup = func() { os.RemoveAll(dir) }
		if err := unix.Mkfifo(in, 0o600); err != nil {
			ch.cleanup()
			return nil, fmt.Errorf("mkfifo: %w", err)
		}
		if err := unix.Mkfifo(out, 0o600); err != nil {
			ch.cleanup()
			return nil, fmt.Errorf("mkfifo: %w", err)
		}
		// Open order: our read end of c2p opens at once with O_NONBLOCK
		// (then the flag is cleared); the child opens its write end of c2p,
		// which succeeds because we are already reading, and reports ready;
		// then the child's blocking open of p2c for reading meets ours.
		r, err := unix.Open(out, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			ch.cleanup()
			return nil, fmt.Errorf("open fifo: %w", err)
		}
		unix.SetNonblock(r, false)
		sc := &streamConn{r: r, w: -1, raw: raw}
		ch.parent = sc
		ch.childArgs = []string{"--fifo-in", in, "--fifo-out", out}
		ch.afterReady = func() error {
			// Poll a non-blocking open (ENXIO until the child opens its
			// read end) rather than block: a child that dies first would
			// leave a blocking open stuck forever. Setup only, not timed.
			for {
				w, err := unix.Open(in, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
				if err == nil {
					sc.w = w
					return unix.SetNonblock(w, false)
				}
				if err != unix.ENXIO && err != unix.EINTR {
					return fmt.Errorf("open fifo: %w", err)
				}
				if abort.Load() {
					return fmt.Errorf("open fifo: %w", io.ErrUnexpectedEOF)
				}
				time.Sleep(200 * time.Microsecond)
			}
		}
	case MechUnixSock, MechUnixgram:
		typ := unix.SOCK_STREAM
		if mech == MechUnixgram {
			typ = unix.SOCK_DGRAM
		}
		sv, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("socketpair: %w", err)
		}
		if mech == MechUnixgram {
			if err := recvTimeouts(sv[0], sv[1]); err != nil {
				return nil, err
			}
			ch.parent = &dgramConn{fd: sv[0], raw: raw, abort: abort}
		} else {
			ch.parent = &streamConn{r: sv[0], w: sv[0], raw: raw}
		}
		ch.childFiles = []*os.File{newFile(sv[1], mech)}
		ch.unblock = func() { unix.Shutdown(sv[0], unix.SHUT_RDWR) }
	case MechTCP:
		a, b, err := rawchan.TCPPair()
		if err != nil {
			return nil, err
		}
		ch.parent = &streamConn{r: a, w: a, raw: raw}
		ch.childFiles = []*os.File{newFile(b, "tcp")}
		ch.unblock = func() { unix.Shutdown(a, unix.SHUT_RDWR) }
	case MechUDP:
		a, b, err := rawchan.UDPPair()
		if err != nil {
			return nil, err
		}
		if err := recvTimeouts(a, b); err != nil {
			return nil, err
		}
		ch.parent = &dgramConn{fd: a, raw: raw, abort: abort}
		ch.childFiles = []*os.File{newFile(b, "udp")}
		ch.unblock = func() { unix.Shutdown(a, unix.SHUT_RDWR) }
	case MechMQ:
		p2c, err := mqCreate(size)
		if err != nil {
			return nil, err
		}
		c2p, err := mqCreate(size)
		if err != nil {
			unix.Close(p2c)
			return nil, err
		}
		// The child gets its own descriptors (dups made by exec); ours stay
		// open so the watchdog can post a poison message on c2p.
		d1, _ := unix.Dup(p2c)
		d2, _ := unix.Dup(c2p)
		mc := &mqConn{tx: p2c, rx: c2p, abort: abort, raw: raw}
		ch.parent = mc
		ch.childFiles = []*os.File{newFile(d1, "mq-p2c"), newFile(d2, "mq-c2p")}
		ch.unblock = func() { mc.poison(size) }
	case MechShmSpin, MechShmFutex, MechShm1CoreProcs:
		fd, err := shmCreate(size)
		if err != nil {
			return nil, err
		}
		sc, err := shmMap(fd, size, modeOf(mech), raw)
		if err != nil {
			unix.Close(fd)
			return nil, err
		}
		ch.parent = sc
		ch.childFiles = []*os.File{newFile(fd, "memfd")}
		ch.unblock = sc.kill
	default:
		return nil, fmt.Errorf("%w: %q", ErrUnknownMechanism, mech)
	}
	return ch, nil
}

func modeOf(mech string) waitMode {
	switch mech {
	case MechShmFutex:
		return waitFutex
	case MechShm1CoreProcs:
		return waitYield
	}
	return waitSpin
}

// childConn builds the echo side's conn from inherited fds 4 and 5.
func childConn(mech string, size int, fifoIn, fifoOut string, raw bool) (conn, error) {
	switch mech {
	case MechPipe:
		return &streamConn{r: 4, w: 5, raw: raw}, nil
	case MechFIFO:
		// Write end first (the parent already reads c2p, so this does not
		// block); the read end of p2c is opened by openFIFOIn after "ready",
		// a blocking open that meets the parent's blocking open for write.
		// Opening it earlier without a writer would make read(2) see EOF.
		w, err := unix.Open(fifoOut, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open fifo: %w", err)
		}
		return &streamConn{r: -1, w: w, raw: raw}, nil
	case MechUnixSock, MechTCP:
		return &streamConn{r: 4, w: 4, raw: raw}, nil
	case MechUnixgram, MechUDP:
		return &dgramConn{fd: 4, raw: raw}, nil
	case MechMQ:
		return &mqConn{tx: 5, rx: 4, raw: raw}, nil
	case MechShmSpin, MechShmFutex, MechShm1CoreProcs:
		return shmMap(4, size, modeOf(mech), raw)
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownMechanism, mech)
}

// openFIFOIn completes a fifo echo conn after the child reported ready.
func openFIFOIn(c conn, path string) error {
	sc, ok := c.(*streamConn)
	if !ok || sc.r >= 0 {
		return nil
	}
	r, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open fifo: %w", err)
	}
	sc.r = r
	return nil
}

// recvTimeouts arms SO_RCVTIMEO on both ends of a datagram pair. Errors
// leave the caller to close the descriptors.
func recvTimeouts(fds ...int) error {
	for _, fd := range fds {
		if err := setRecvTimeout(fd); err != nil {
			for _, f := range fds {
				unix.Close(f)
			}
			return err
		}
	}
	return nil
}

func itoa(n int) string { return strconv.Itoa(n) }
