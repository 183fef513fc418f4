package peers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ipclab/logagg/internal/bench/harness"
)

// NullReaderSubcommand is the hidden ipcbench subcommand that runs the null
// reader (NullReaderMain).
const NullReaderSubcommand = "_null-reader"

// NullReader is the reference of a comparison: a process that accepts the
// producers' records on the same sockets as the daemons and throws them
// away, counting them. It shows what the producers reach when the reader
// does no work. It is not a strict ceiling: it reads as soon as data
// arrives, and on this VM a reader that wakes for every write makes the
// producers' writes dearer, so a daemon that reads less often (our read
// coalescing; rsyslog and TCP) can get more out of the same producers.
//
// It runs as its own process (Bin NullReaderSubcommand ...), so its CPU time
// and RSS are measured like a daemon's.
type NullReader struct {
	Bin string // the ipcbench executable
}

// Name implements harness.Daemon.
func (NullReader) Name() string { return "null-reader" }

// Start implements harness.Daemon.
func (n NullReader) Start(ctx context.Context, dir string, transports []string, stderr io.Writer) (harness.Running, error) {
	e, err := newEndpoints(dir)
	if err != nil {
		return nil, err
	}
	counts := filepath.Join(dir, "null-reader.counts.json")
	args := []string{NullReaderSubcommand, "--counts", counts}
	for _, t := range transports {
		u := e.url(t)
		if u == "" {
			return nil, fmt.Errorf("null reader: unsupported transport %q", t)
		}
		args = append(args, "--listen", t+"="+u)
	}
	cmd := exec.CommandContext(ctx, n.Bin, args...)
	waitErr, buf, err := startAndWait(cmd, e, transports, stderr)
	if err != nil {
		return nil, err
	}
	return &nullRunning{running: running{e: e, cmd: cmd, config: n.Bin + " " + fmt.Sprint(args), stderr: buf, waitErr: waitErr}, counts: counts}, nil
}

type nullRunning struct {
	running
	counts string
}

// Output is empty: the null reader writes no records, so throughput.Measure
// takes its counts from Written (harness.WrittenCounter).
func (r *nullRunning) Output() string { return "" }

// Written returns the records received per transport so far.
func (r *nullRunning) Written() map[string]int64 {
	out := map[string]int64{}
	b, err := os.ReadFile(r.counts)
	if err == nil {
		_ = json.Unmarshal(b, &out)
	}
	return out
}

// NullReaderMain is the null reader's process: it listens where told
// (--listen TRANSPORT=URL, repeated), reads everything, counts records per
// transport (newlines on stream sockets, datagrams on datagram sockets) and
// rewrites the counts file every 20 ms until SIGTERM.
func NullReaderMain(args []string) int {
	fs := flag.NewFlagSet(NullReaderSubcommand, flag.ContinueOnError)
	counts := fs.String("counts", "", "file the counts are written to")
	var listen []string
	fs.Func("listen", "TRANSPORT=URL to read (repeatable): unix://, tcp://, unixgram://, udp://", func(v string) error {
		listen = append(listen, v)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *counts == "" {
		fmt.Fprintln(os.Stderr, "null-reader: --counts is required")
		return 2
	}
	c := nullCounts{}
	var closers []io.Closer
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "null-reader:", err)
		for _, cl := range closers {
			cl.Close()
		}
		return 1
	}
	for _, l := range listen {
		transport, u, ok := strings.Cut(l, "=")
		network, addr, ok2 := strings.Cut(u, "://")
		if !ok || !ok2 {
			return fail(fmt.Errorf("--listen %q: want TRANSPORT=SCHEME://ADDRESS", l))
		}
		n := new(atomic.Int64)
		c[transport] = n
		switch network {
		case "unix", "tcp":
			ln, err := net.Listen(network, addr)
			if err != nil {
				return fail(err)
			}
			closers = append(closers, ln)
			go acceptAndCount(ln, n)
		case "unixgram", "udp":
			pc, err := net.ListenPacket(network, addr)
			if err != nil {
				return fail(err)
			}
			closers = append(closers, pc)
			go countDatagrams(pc, n)
		default:
			return fail(fmt.Errorf("--listen %q: unknown scheme %q", l, network))
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-sig:
			for _, cl := range closers {
				cl.Close()
			}
			if err := c.write(*counts); err != nil {
				return fail(err)
			}
			return 0
		case <-tick.C:
			if err := c.write(*counts); err != nil {
				return fail(err)
			}
		}
	}
}

// nullCounts are the records received per transport.
type nullCounts map[string]*atomic.Int64

// write replaces the counts file atomically, so a reader never sees half.
func (c nullCounts) write(path string) error {
	m := make(map[string]int64, len(c))
	for t, n := range c {
		m[t] = n.Load()
	}
	b, _ := json.Marshal(m)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func acceptAndCount(ln net.Listener, n *atomic.Int64) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			buf := make([]byte, 256<<10)
			for {
				k, err := conn.Read(buf)
				n.Add(int64(bytes.Count(buf[:k], []byte{'\n'})))
				if err != nil {
					return
				}
			}
		}()
	}
}

// countDatagrams reads with the largest receive buffer the kernel grants,
// as the daemons ask for theirs.
func countDatagrams(pc net.PacketConn, n *atomic.Int64) {
	if rb, ok := pc.(interface{ SetReadBuffer(int) error }); ok {
		_ = rb.SetReadBuffer(8 << 20)
	}
	buf := make([]byte, 64<<10)
	for {
		_, _, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		n.Add(1)
	}
}
