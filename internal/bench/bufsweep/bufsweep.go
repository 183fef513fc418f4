package bufsweep

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/bench"
)

// Transports are the transports bufsweep knows, in default order.
var Transports = []string{"tcp", "unixsock", "fifo"}

// DefaultSizes are powers of 4 from 1 B to 1 MiB; QuickSizes a handful.
var (
	DefaultSizes = []int{1, 4, 16, 64, 256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20}
	QuickSizes   = []int{1, 64, 4 << 10, 64 << 10, 1 << 20}
)

// ErrBadOptions is returned (wrapped) for invalid Options.
var ErrBadOptions = errors.New("bad bufsweep options")

// Options configure Run. Zero values take the documented defaults (the
// quick ones when Quick is set).
type Options struct {
	Transports []string // default Transports
	Sizes      []int    // write buffer sizes; default DefaultSizes (quick QuickSizes)
	Volume     int      // bytes per row; default 64 MiB (quick 4 MiB)
	// MaxWrites caps the volume of small-buffer rows at MaxWrites*size so
	// that 1-byte writes finish: default 1<<20 (quick 20000, each row well
	// under a second). A capped row says so (Row.Capped).
	MaxWrites int
	// RecordSize is the size of the application's writes into the buffer;
	// default 100 (a log line).
	RecordSize int
	// Faults are fault profile names (see Profiles); default {"none"}.
	Faults []string
	Quick  bool
	// Dir holds FIFOs; default a new temporary directory.
	Dir      string
	Progress *bench.Progress
}

// Params is what a Result records about the run.
type Params struct {
	Transports []string `json:"transports"`
	Sizes      []int    `json:"sizes"`
	Volume     int      `json:"volume"`
	MaxWrites  int      `json:"max_writes"`
	RecordSize int      `json:"record_size"`
	Faults     []string `json:"faults"`
	Quick      bool     `json:"quick"`
	// Netem says whether the kernel's netem qdisc was usable, and if not why.
	Netem string `json:"netem"`
}

// Row is one transport × fault × buffer size.
type Row struct {
	Transport string `json:"transport"`
	Fault     string `json:"fault"`
	// FaultVia is "toxiproxy", "netem" or "" (no fault).
	FaultVia string `json:"fault_via,omitempty"`
	Buffer   int    `json:"buffer"`
	Volume   int    `json:"volume"`
	Capped   bool   `json:"capped,omitempty"`
	// ElapsedNs runs from the writer's first byte to the reader's EOF.
	ElapsedNs int64   `json:"elapsed_ns"`
	MBps      float64 `json:"mb_per_s"` // 10^6 bytes per second
	// Flushes is the number of buffer flushes (ceil(Volume/Buffer));
	// WriteSyscalls the write(2) calls the writer made for them (more only
	// when a write returned short: PartialWrites, or EINTR).
	Flushes       int64 `json:"flushes"`
	WriteSyscalls int64 `json:"write_syscalls"`
	PartialWrites int64 `json:"partial_writes"`
	// SyscwThread and SyscwProcess are the syscw deltas of
	// /proc/thread-self/io (writer thread) and /proc/self/io (process);
	// -1 when unreadable.
	SyscwThread  int64  `json:"syscw_thread"`
	SyscwProcess int64  `json:"syscw_process"`
	Received     int64  `json:"received"`
	Error        string `json:"error,omitempty"`
}

// Report is what Run returns.
type Report struct {
	Params Params
	Rows   []Row
	Notes  []string
}

func (o *Options) fill() error {
	if len(o.Transports) == 0 {
		o.Transports = Transports
	}
	if len(o.Sizes) == 0 {
		o.Sizes = DefaultSizes
		if o.Quick {
			o.Sizes = QuickSizes
		}
	}
	if o.Volume == 0 {
		o.Volume = 64 << 20
		if o.Quick {
			o.Volume = 4 << 20
		}
	}
	if o.MaxWrites == 0 {
		o.MaxWrites = 1 << 20
		if o.Quick {
			o.MaxWrites = 20000
		}
	}
	if o.RecordSize == 0 {
		o.RecordSize = 100
	}
	if len(o.Faults) == 0 {
		o.Faults = []string{"none"}
	}
	for _, t := range o.Transports {
		if !slices.Contains(Transports, t) {
			return fmt.Errorf("%w: unknown transport %q (known: %s)", ErrBadOptions, t, strings.Join(Transports, ","))
		}
	}
	for _, s := range o.Sizes {
		if s < 1 || s > 64<<20 {
			return fmt.Errorf("%w: buffer size %d outside 1..64MiB", ErrBadOptions, s)
		}
	}
	for _, f := range o.Faults {
		if _, ok := Profiles[f]; !ok {
			return fmt.Errorf("%w: unknown fault profile %q (known: %s)", ErrBadOptions, f, strings.Join(ProfileNames(), ","))
		}
	}
	if o.Volume < 1 || o.MaxWrites < 1 || o.RecordSize < 1 {
		return fmt.Errorf("%w: volume, max writes and record size must be positive", ErrBadOptions)
	}
	return nil
}

// Run measures every transport × fault × size.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "lgbuf")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	rep := &Report{Params: Params{Transports: o.Transports, Sizes: o.Sizes, Volume: o.Volume, MaxWrites: o.MaxWrites,
		RecordSize: o.RecordSize, Faults: o.Faults, Quick: o.Quick}}
	useNetem := false
	if slices.ContainsFunc(o.Faults, func(f string) bool { return f != "none" }) {
		ok, why := NetemAvailable(ctx)
		useNetem = ok
		if ok {
			rep.Params.Netem = "available: faults via tc netem in a private network namespace"
		} else {
			rep.Params.Netem = "unavailable (" + why + "): faults via toxiproxy"
		}
		rep.Notes = append(rep.Notes, "netem "+rep.Params.Netem)
	}
	capped := false
	for _, fault := range o.Faults {
		for _, t := range o.Transports {
			if fault != "none" && t != "tcp" {
				rep.Notes = append(rep.Notes, fmt.Sprintf("fault %s skipped for %s: faults apply to tcp only", fault, t))
				continue
			}
			for _, size := range o.Sizes {
				if err := ctx.Err(); err != nil {
					return rep, err
				}
				vol := o.Volume
				if size*o.MaxWrites < vol {
					vol = size * o.MaxWrites
				}
				row := Row{Transport: t, Fault: fault, Buffer: size, Volume: vol, Capped: vol < o.Volume}
				capped = capped || row.Capped
				o.Progress.SetLabel(fmt.Sprintf("%s %s buf=%s", t, fault, bench.FormatSize(size)))
				if err := measure(ctx, &o, &row, dir, useNetem); err != nil {
					row.Error = err.Error()
					rep.Notes = append(rep.Notes, fmt.Sprintf("%s %s buffer %d: %v", t, fault, size, err))
				}
				o.Progress.Add(1)
				rep.Rows = append(rep.Rows, row)
			}
		}
	}
	if capped {
		rep.Notes = append(rep.Notes, fmt.Sprintf("rows with small buffers move at most %d writes' worth (buffer × %d bytes) instead of %d bytes, so 1-byte writes finish; see each row's volume",
			o.MaxWrites, o.MaxWrites, o.Volume))
	}
	return rep, nil
}

// endpoints are the writer's and reader's descriptors of one row.
type endpoints struct {
	w, r    int
	via     string
	cleanup func()
}

func measure(ctx context.Context, o *Options, row *Row, dir string, useNetem bool) error {
	ep, err := connect(ctx, row.Transport, row.Fault, dir, useNetem)
	if err != nil {
		return err
	}
	defer ep.cleanup()
	row.FaultVia = ep.via
	type readResult struct {
		n   int64
		end int64
		err error
	}
	rd := make(chan readResult, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		buf := make([]byte, 256<<10)
		var n int64
		for {
			k, err := unix.Read(ep.r, buf)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				rd <- readResult{n, time.Now().UnixNano(), err}
				return
			}
			if k == 0 {
				rd <- readResult{n, time.Now().UnixNano(), nil}
				return
			}
			n += int64(k)
		}
	}()
	wr := make(chan writeResult, 1)
	go func() { wr <- writeAll(ep.w, row.Buffer, row.Volume, o.RecordSize) }()
	w := <-wr
	r := <-rd
	if w.err != nil {
		return w.err
	}
	if r.err != nil {
		return fmt.Errorf("read: %w", r.err)
	}
	row.Flushes, row.WriteSyscalls, row.PartialWrites = w.flushes, w.syscalls, w.partial
	row.SyscwThread, row.SyscwProcess = w.syscwThread, w.syscwProcess
	row.Received = r.n
	row.ElapsedNs = r.end - w.start
	if r.n != int64(row.Volume) {
		return fmt.Errorf("reader got %d bytes, writer sent %d", r.n, row.Volume)
	}
	if row.ElapsedNs > 0 {
		row.MBps = float64(row.Volume) / (float64(row.ElapsedNs) / 1e9) / 1e6
	}
	return nil
}

type writeResult struct {
	start                      int64
	flushes, syscalls, partial int64
	syscwThread, syscwProcess  int64
	err                        error
}

// writeAll is the setvbuf-style writer; it closes fd when done so the
// reader sees EOF.
func writeAll(fd, bufSize, volume, recSize int) (res writeResult) {
	// Locked and never unlocked: the thread-level syscw must be this
	// writer's alone, and the thread dies with the goroutine.
	runtime.LockOSThread()
	defer unix.Close(fd)
	rec := make([]byte, recSize)
	for i := range rec {
		rec[i] = 'a' + byte(i%26)
	}
	rec[recSize-1] = '\n'
	buf := make([]byte, bufSize)
	flush := func(p []byte) error {
		res.flushes++
		for len(p) > 0 {
			res.syscalls++
			n, err := unix.Write(fd, p)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return fmt.Errorf("write: %w", err)
			}
			if n < len(p) {
				res.partial++
			}
			p = p[n:]
		}
		return nil
	}
	t0, p0 := syscw("/proc/thread-self/io"), syscw("/proc/self/io")
	res.start = time.Now().UnixNano()
	used, left := 0, volume
	for left > 0 {
		r := rec[:min(len(rec), left)]
		left -= len(r)
		for len(r) > 0 {
			c := copy(buf[used:], r)
			used += c
			r = r[c:]
			if used == bufSize {
				if err := flush(buf); err != nil {
					res.err = err
					return res
				}
				used = 0
			}
		}
	}
	if used > 0 {
		if err := flush(buf[:used]); err != nil {
			res.err = err
			return res
		}
	}
	t1, p1 := syscw("/proc/thread-self/io"), syscw("/proc/self/io")
	res.syscwThread, res.syscwProcess = delta(t0, t1), delta(p0, p1)
	return res
}

func delta(a, b int64) int64 {
	if a < 0 || b < 0 {
		return -1
	}
	return b - a
}

// syscw reads the syscw counter of an io accounting file, -1 if unreadable.
func syscw(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "syscw:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// connect makes the writer/reader descriptors for transport t, with the
// fault in between.
func connect(ctx context.Context, t, fault, dir string, useNetem bool) (*endpoints, error) {
	switch t {
	case "unixsock":
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("socketpair: %w", err)
		}
		return &endpoints{w: fds[0], r: fds[1], cleanup: func() { unix.Close(fds[1]) }}, nil
	case "fifo":
		p := filepath.Join(dir, "bufsweep.fifo")
		os.Remove(p)
		if err := unix.Mkfifo(p, 0o600); err != nil {
			return nil, fmt.Errorf("mkfifo: %w", err)
		}
		r, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		w, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.SetNonblock(r, false)
		}
		if err != nil {
			unix.Close(r)
			return nil, err
		}
		return &endpoints{w: w, r: r, cleanup: func() { unix.Close(r); os.Remove(p) }}, nil
	case "tcp":
		if fault == "none" {
			return tcpPair(nil)
		}
		if useNetem {
			return netemPair(ctx, Profiles[fault])
		}
		return toxiPair(Profiles[fault])
	}
	return nil, fmt.Errorf("%w: unknown transport %q", ErrBadOptions, t)
}

// tcpPair connects a writer socket to a reader socket on 127.0.0.1. With
// via non-nil, the writer connects to the address via returns for the
// reader's address (a proxy) instead.
func tcpPair(via func(upstream string) (string, func(), error)) (*endpoints, error) {
	l, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(l)
	if err := unix.Bind(l, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return nil, err
	}
	if err := unix.Listen(l, 1); err != nil {
		return nil, err
	}
	sa, err := unix.Getsockname(l)
	if err != nil {
		return nil, err
	}
	port := sa.(*unix.SockaddrInet4).Port
	target, stop := port, func() {}
	if via != nil {
		addr, s, err := via("127.0.0.1:" + strconv.Itoa(port))
		if err != nil {
			return nil, err
		}
		stop = s
		_, ps, _ := strings.Cut(addr, ":")
		if target, err = strconv.Atoi(ps); err != nil {
			stop()
			return nil, fmt.Errorf("proxy address %q: %w", addr, err)
		}
	}
	w, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		stop()
		return nil, err
	}
	if err := unix.Connect(w, &unix.SockaddrInet4{Port: target, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(w)
		stop()
		return nil, fmt.Errorf("connect: %w", err)
	}
	// A proxy dials the reader only after accepting the writer; a broken
	// proxy must not hang the row, so accept with a deadline.
	if _, err := unix.Poll([]unix.PollFd{{Fd: int32(l), Events: unix.POLLIN}}, 10000); err != nil {
		unix.Close(w)
		stop()
		return nil, err
	}
	r, _, err := unix.Accept4(l, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
	if err == nil {
		err = unix.SetNonblock(r, false)
	}
	if err != nil {
		unix.Close(w)
		stop()
		return nil, fmt.Errorf("accept: %w", err)
	}
	return &endpoints{w: w, r: r, cleanup: func() { unix.Close(r); stop() }}, nil
}

// Table renders rows (µs/MB/s and syscall counts).
func Table(rows []Row) *bench.Table {
	t := &bench.Table{Header: []string{"transport", "fault", "via", "buffer", "volume", "elapsed", "MB/s",
		"flushes", "write()", "partial", "syscw thr", "syscw proc"}}
	for _, r := range rows {
		if r.Error != "" {
			continue
		}
		via := r.FaultVia
		if via == "" {
			via = "-"
		}
		vol := bench.FormatSize(r.Volume)
		if r.Capped {
			vol += "*"
		}
		t.Add(r.Transport, r.Fault, via, bench.FormatSize(r.Buffer), vol, bench.FormatNs(float64(r.ElapsedNs)),
			fmt.Sprintf("%.1f", r.MBps), r.Flushes, r.WriteSyscalls, r.PartialWrites, r.SyscwThread, r.SyscwProcess)
	}
	return t
}
