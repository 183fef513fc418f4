package latency

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/rawchan"
)

// EchoSubcommand is the hidden subcommand a binary must route to EchoMain
// (ipcbench's main does as "_latency-echo"; tests do it in TestMain).
const EchoSubcommand = "_latency-echo"

// Payload layout: the scheduled send time, the echo's receive time, the
// message index, the time the sender actually sent it, and the CPU the
// echo ran on plus one (0 where the echo did not sample it), all little
// endian.
const (
	offDue     = 0
	offEcho    = 8
	offIndex   = 16
	offSent    = 24
	offEchoCPU = 32
	minPayload = 36
)

// pair is one raw-mode channel: the parent's descriptor(s) and what the
// echo child gets.
type pair struct {
	tx, rx     int        // parent side (equal for sockets)
	dgram      bool       // message boundaries are the kernel's
	childFiles []*os.File // become fds 3 (and 4) in the child
	childArgs  []string
}

func (p *pair) close() {
	unix.Close(p.tx)
	if p.rx != p.tx {
		unix.Close(p.rx)
	}
	for _, f := range p.childFiles {
		f.Close()
	}
}

// newPair creates the channel for transport t. FIFOs live in dir.
func newPair(t, dir string) (*pair, error) {
	switch t {
	case rawchan.UnixStream, rawchan.UnixDgram, rawchan.TCP, rawchan.UDP:
		parent, child, dgram, err := rawchan.Dial(t)
		if err != nil {
			return nil, err
		}
		return &pair{tx: parent, rx: parent, dgram: dgram, childFiles: []*os.File{os.NewFile(uintptr(child), t)}}, nil
	case "fifo":
		down, up := filepath.Join(dir, "lat.down"), filepath.Join(dir, "lat.up")
		for _, p := range []string{down, up} {
			os.Remove(p)
			if err := unix.Mkfifo(p, 0o600); err != nil {
				return nil, fmt.Errorf("mkfifo: %w", err)
			}
		}
		// O_RDWR never blocks in open and keeps both FIFOs alive whatever
		// the child does; the child opens them by path as a producer would.
		tx, err := unix.Open(down, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		rx, err := unix.Open(up, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			unix.Close(tx)
			return nil, err
		}
		return &pair{tx: tx, rx: rx, childArgs: []string{"--fifo-in", down, "--fifo-out", up}}, nil
	}
	return nil, fmt.Errorf("%w: unknown raw transport %q", ErrBadOptions, t)
}

// writeMsg writes p whole (stream) or as one datagram, waiting for room
// when the descriptor is non-blocking.
//
// Every side of a raw row (sender, receiver, echo) reads and writes with
// raw syscalls (rawchan.IO.Raw), as rtt does: with Go's syscalls a thread
// blocked for more than 20 µs loses its P to sysmon and must get one back
// before it can go on, which put ipcbench latency's round trips 20–100 %
// above sockperf's at p50 here. A raw blocking call must be bounded (a
// stop-the-world waits for it): socket receives carry SO_RCVTIMEO, FIFOs
// are read non-blocking, and none of the loops allocates.
func writeMsg(fd int, p []byte, dgram bool) error {
	return rawchan.IO{Dgram: dgram, Raw: true}.Send(fd, p)
}

// readMsg reads one message into p (stream: exactly len(p) bytes). When a
// receive finds nothing (a non-blocking descriptor, or SO_RCVTIMEO
// expired) it gives up with errTimeout once stop() is true, so a dead peer
// cannot hang the row.
func readMsg(fd int, p []byte, dgram bool, stop func() bool) error {
	return rawchan.IO{Dgram: dgram, Raw: true, Stop: stop}.Recv(fd, p)
}

var (
	errTimeout = rawchan.ErrStopped
	errEOF     = rawchan.ErrClosed
)

// EchoMain is the echo side of a raw row: it echoes every message back
// with its receive time at [8:16] until the peer closes or it is killed.
// The socket is fd 3; FIFOs are opened by path. It writes "ready" on
// stdout once it can echo. It returns the process exit code.
func EchoMain(args []string) int {
	fs := flag.NewFlagSet(EchoSubcommand, flag.ContinueOnError)
	size := fs.Int("size", 4096, "message bytes")
	dgram := fs.Bool("dgram", false, "datagram transport")
	fifoIn := fs.String("fifo-in", "", "FIFO to read")
	fifoOut := fs.String("fifo-out", "", "FIFO to write")
	cpu := fs.Int("cpu", -1, "CPU to pin the echo thread to (-1: none)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *size < minPayload {
		fmt.Fprintln(os.Stderr, "latency echo: size too small")
		return 2
	}
	// The echo thread never unlocks: it is the whole process's purpose.
	runtime.LockOSThread()
	setTimerSlack()
	if *cpu >= 0 {
		if err := bench.PinThread(*cpu); err != nil {
			fmt.Fprintln(os.Stderr, "latency echo:", err)
			return 1
		}
	}
	rx, tx := 3, 3
	if *fifoIn != "" {
		var err error
		if rx, err = unix.Open(*fifoIn, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			tx, err = unix.Open(*fifoOut, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "latency echo:", err)
			return 1
		}
	} else if err := unix.SetNonblock(3, false); err != nil {
		fmt.Fprintln(os.Stderr, "latency echo: no socket on fd 3 (this subcommand is internal):", err)
		return 2
	}
	if _, err := os.Stdout.WriteString("ready\n"); err != nil {
		return 1
	}
	buf := make([]byte, *size)
	for n := 0; ; n++ {
		if err := readMsg(rx, buf, *dgram, nil); err != nil {
			if errors.Is(err, errEOF) {
				return 0
			}
			fmt.Fprintln(os.Stderr, "latency echo: read:", err)
			return 1
		}
		binary.LittleEndian.PutUint64(buf[offEcho:], uint64(nanotime()))
		if n%cpuSample == 0 {
			binary.LittleEndian.PutUint32(buf[offEchoCPU:], uint32(bench.GetCPU()+1))
		}
		if err := writeMsg(tx, buf, *dgram); err != nil {
			if errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.ECONNREFUSED) {
				return 0
			}
			fmt.Fprintln(os.Stderr, "latency echo: write:", err)
			return 1
		}
	}
}

// measureRaw runs one raw row: start the echo child, pace Warmup+Duration
// worth of messages from one locked thread, receive echoes on another,
// each thread (and the echo's) on the CPU pl gives it.
func measureRaw(ctx context.Context, o *Options, t string, size int, dir string, pl placement) (Row, error) {
	p, err := newPair(t, dir)
	if err != nil {
		return Row{}, err
	}
	defer p.close()
	args := append(append([]string{}, o.EchoArgs...), "--size", strconv.Itoa(size))
	if p.dgram {
		args = append(args, "--dgram")
	}
	if pl.echo >= 0 {
		args = append(args, "--cpu", strconv.Itoa(pl.echo))
	}
	args = append(args, p.childArgs...)
	var childDead atomic.Bool
	child, err := rawchan.ChildSpec{Exe: o.Exe, Args: args, Files: p.childFiles, ReadStdout: true,
		OnExit: func() { childDead.Store(true) }}.Start(ctx)
	p.childFiles = nil // Start closed them
	if err != nil {
		return Row{}, err
	}
	defer child.Kill()
	ready := make(chan bool, 1)
	go func() {
		line, rerr := bufio.NewReader(child.Stdout()).ReadString('\n')
		ready <- rerr == nil && line == "ready\n"
	}()
	select {
	case ok := <-ready:
		if !ok {
			return Row{}, child.Fail(errors.New("echo side died at start-up"))
		}
	case <-time.After(10 * time.Second):
		return Row{}, child.Fail(errors.New("echo side not ready within 10s"))
	}
	if p.tx == p.rx {
		// A socket: blocking, its receives bounded by SO_RCVTIMEO.
		if err := rawchan.SetRecvTimeout(p.rx); err != nil {
			return Row{}, err
		}
	} else {
		// FIFOs, held open read-write here, never see their writer go:
		// read them non-blocking, polling in 100 ms steps.
		for _, fd := range []int{p.tx, p.rx} {
			if err := unix.SetNonblock(fd, true); err != nil {
				return Row{}, err
			}
		}
	}
	row, err := runPaced(o, size, p, &childDead, pl)
	if err != nil {
		return Row{}, child.Fail(err)
	}
	return row, nil
}
