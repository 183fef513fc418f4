package bufsweep

import (
	"bufio"
	"cmp"
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
	"github.com/ipclab/logagg/internal/bench/rawchan"
)

// Kind is the subcommand name and the Result kind.
const Kind = "bufsweep"

// Transports are the transports bufsweep knows, in default order.
var Transports = []string{"tcp", "unixsock", "fifo"}

// DefaultSizes are powers of 4 from 1 B to 1 MiB; QuickSizes a handful.
var (
	DefaultSizes = []int{1, 4, 16, 64, 256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20}
	QuickSizes   = []int{1, 64, 4 << 10, 64 << 10, 1 << 20}
)

// Default volumes: every row of a run moves the same volume, so the
// 1-byte rows (about 1 MB/s over TCP: one write(2) per byte) set it. 16 MiB
// takes them ~15 s a run, 1 MiB about one second.
const (
	DefaultVolume = 16 << 20
	QuickVolume   = 1 << 20
)

// ErrBadOptions is returned (wrapped) for invalid Options.
var ErrBadOptions = errors.New("bad bufsweep options")

// Options configure Run. Zero values take the documented defaults (the
// quick ones when Quick is set); Validate fills them in.
type Options struct {
	Transports []string // default Transports
	Sizes      []int    // write buffer sizes; default DefaultSizes (quick QuickSizes)
	// Volume is the bytes every row moves; default DefaultVolume (quick
	// QuickVolume).
	Volume int
	// Runs is how many times each row is measured (interleaved: run 1 of
	// every row, then run 2, ...); default 3 (quick 1).
	Runs int
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
	Runs       int      `json:"runs"`
	RecordSize int      `json:"record_size"`
	Faults     []string `json:"faults"`
	Quick      bool     `json:"quick"`
}

// Row is one transport × fault × buffer size, summarised over its runs.
type Row struct {
	Transport string `json:"transport"`
	Fault     string `json:"fault"`
	Engine    Engine `json:"engine"`
	// FaultDetail says what the engine did (Profile.Describe).
	FaultDetail string `json:"fault_detail"`
	Buffer      int    `json:"buffer"`
	Volume      int    `json:"volume"`
	// Runs is the number of measurements that succeeded; the figures
	// below summarise them.
	Runs int `json:"runs"`
	// MBps is the median over runs (nearest rank), MBpsMin and MBpsMax the
	// spread; 10^6 bytes per second from the writer's first byte to the
	// reader's EOF.
	MBps    float64 `json:"mb_per_s"`
	MBpsMin float64 `json:"mb_per_s_min"`
	MBpsMax float64 `json:"mb_per_s_max"`
	// The rest are the median run's. Flushes is the number of buffer
	// flushes (ceil(Volume/Buffer)); WriteSyscalls the write(2) calls the
	// writer made for them (more only when a write returned short:
	// PartialWrites, or EINTR). SyscwThread and SyscwProcess are the syscw
	// deltas of /proc/thread-self/io (writer thread) and /proc/self/io
	// (process); -1 when unreadable.
	ElapsedNs     int64 `json:"elapsed_ns"`
	Flushes       int64 `json:"flushes"`
	WriteSyscalls int64 `json:"write_syscalls"`
	PartialWrites int64 `json:"partial_writes"`
	SyscwThread   int64 `json:"syscw_thread"`
	SyscwProcess  int64 `json:"syscw_process"`
	// EngineNftNetns rows only, summed over runs: the TCP packets lo delivered
	// and the rule dropped (nftables counters), and the segments TCP
	// retransmitted (TcpRetransSegs of the namespace's /proc/net/snmp).
	// They show that the loss really happened. Duplicates counts the
	// segments the receiver got twice and said so with a D-SACK (TcpExt
	// TCPDSACKOldSent + TCPDSACKOfoSent): retransmissions of what was not
	// lost, which a late acknowledgement (a loss probe fires) or segments
	// reordered on lo (the sender moved between CPUs) cause on a busy machine.
	TCPPackets  int64  `json:"tcp_packets,omitempty"`
	Dropped     int64  `json:"dropped,omitempty"`
	Retransmits int64  `json:"retransmits,omitempty"`
	Duplicates  int64  `json:"duplicates,omitempty"`
	Error       string `json:"error,omitempty"`
}

// Result is what Run returns.
type Result struct {
	Params Params
	Rows   []Row
	Notes  []string
}

// sample is one measurement of one row (also the netns child's answer).
type sample struct {
	ElapsedNs     int64  `json:"elapsed_ns"`
	Received      int64  `json:"received"`
	Flushes       int64  `json:"flushes"`
	WriteSyscalls int64  `json:"write_syscalls"`
	PartialWrites int64  `json:"partial_writes"`
	SyscwThread   int64  `json:"syscw_thread"`
	SyscwProcess  int64  `json:"syscw_process"`
	TCPPackets    int64  `json:"tcp_packets"`
	Dropped       int64  `json:"dropped"`
	Retransmits   int64  `json:"retransmits"`
	Duplicates    int64  `json:"duplicates"`
	Err           string `json:"error,omitempty"`
}

// Validate fills in the defaults and checks the options.
func (o *Options) Validate() error {
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
		o.Volume = DefaultVolume
		if o.Quick {
			o.Volume = QuickVolume
		}
	}
	if o.Runs == 0 {
		o.Runs = 3
		if o.Quick {
			o.Runs = 1
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
	if o.Volume < 1 || o.Runs < 1 || o.RecordSize < 1 {
		return fmt.Errorf("%w: volume, runs and record size must be positive", ErrBadOptions)
	}
	return nil
}

// Measurements is the number of measurements Run makes with o (validated):
// the progress bar's total.
func (o *Options) Measurements() int64 {
	rows, _ := plan(o, "")
	return int64(len(rows) * o.Runs)
}

// plan lists the rows Run measures, and notes on the combinations it
// leaves out. lossUnavailable, when not empty, says why loss rows cannot run.
func plan(o *Options, lossUnavailable string) (rows []Row, notes []string) {
	faultsSkipped := false
	for _, fault := range o.Faults {
		p := Profiles[fault]
		if p.Engine == EngineNftNetns && lossUnavailable != "" {
			notes = append(notes, fmt.Sprintf("fault %s skipped: %s", fault, lossUnavailable))
			continue
		}
		for _, t := range o.Transports {
			if p.Engine != EngineNone && t != "tcp" {
				faultsSkipped = true
				continue
			}
			for _, size := range o.Sizes {
				rows = append(rows, Row{Transport: t, Fault: fault, Engine: p.Engine, FaultDetail: p.Describe(), Buffer: size, Volume: o.Volume})
			}
		}
	}
	if faultsSkipped {
		notes = append(notes, "faults apply to tcp only: the other transports ran without them")
	}
	return rows, notes
}

// Run measures every transport × fault × size, o.Runs times.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "lgbuf")
		if err != nil {
			return nil, fmt.Errorf("fifo directory: %w", err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	res := &Result{Params: Params{Transports: o.Transports, Sizes: o.Sizes, Volume: o.Volume, Runs: o.Runs,
		RecordSize: o.RecordSize, Faults: o.Faults, Quick: o.Quick}}
	rows, notes := plan(&o, lossUnavailable())
	res.Notes = append(res.Notes, notes...)
	samples := make([][]sample, len(rows))
	// Run-major order: every row's first run, then every row's second, so
	// that drift in the machine's load spreads over all rows alike.
	for run := 0; run < o.Runs; run++ {
		if err := measureLossRows(ctx, &o, rows, samples); err != nil {
			return nil, err
		}
		for i, r := range rows {
			if r.Engine == EngineNftNetns {
				continue // measured together above, in the namespace
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			o.Progress.SetLabel(fmt.Sprintf("run %d: %s %s buf=%s", run+1, r.Transport, r.Fault, bench.FormatSize(r.Buffer)))
			samples[i] = append(samples[i], measureOnce(r.Transport, Profiles[r.Fault], r.Buffer, o.Volume, o.RecordSize, dir))
			o.Progress.Add(1)
		}
	}
	engines := map[Engine]bool{}
	for i := range rows {
		summarize(&rows[i], samples[i])
		engines[rows[i].Engine] = true
		if rows[i].Error != "" {
			res.Notes = append(res.Notes, fmt.Sprintf("%s %s buffer %d: %s", rows[i].Transport, rows[i].Fault, rows[i].Buffer, rows[i].Error))
		}
	}
	if engines[EngineNftNetns] {
		res.Notes = append(res.Notes, "loss rows ran in a private network namespace with an nftables drop rule per packet; "+
			"their tcp packets, dropped and retransmits columns are the kernel's counters, summed over runs")
	}
	if engines[EngineToxiproxy] {
		res.Notes = append(res.Notes, "delay rows: toxiproxy's latency toxic delays each chunk it reads, not each packet "+
			"(pipelined: a transfer gains about one delay, not one per write); this kernel has no sch_netem for per-packet delay (ADR 0042)")
	}
	res.Rows = rows
	return res, nil
}

// summarize fills r's figures from its runs' samples.
func summarize(r *Row, samples []sample) {
	var ok []sample
	for _, s := range samples {
		if s.Err != "" {
			if r.Error == "" {
				r.Error = s.Err
			}
			continue
		}
		ok = append(ok, s)
		r.TCPPackets += s.TCPPackets
		r.Dropped += s.Dropped
		r.Retransmits += s.Retransmits
		r.Duplicates += s.Duplicates
	}
	r.Runs = len(ok)
	if len(ok) == 0 {
		return
	}
	// Same volume every run: the fastest run is the shortest.
	slices.SortFunc(ok, func(a, b sample) int { return cmp.Compare(b.ElapsedNs, a.ElapsedNs) })
	mbps := func(s sample) float64 { return float64(r.Volume) / (float64(max(s.ElapsedNs, 1)) / 1e9) / 1e6 }
	// Nearest rank, as bench.Summarize: the median is a run that happened.
	med := ok[(len(ok)+1)/2-1]
	r.MBps, r.MBpsMin, r.MBpsMax = mbps(med), mbps(ok[0]), mbps(ok[len(ok)-1])
	r.ElapsedNs, r.Flushes, r.WriteSyscalls, r.PartialWrites = med.ElapsedNs, med.Flushes, med.WriteSyscalls, med.PartialWrites
	r.SyscwThread, r.SyscwProcess = med.SyscwThread, med.SyscwProcess
}

// endpoints are the writer's and reader's descriptors of one row.
type endpoints struct {
	w, r    int
	cleanup func()
}

// measureOnce moves volume bytes through a buffer of bufSize over a fresh
// connection of transport t with fault p in between.
func measureOnce(t string, p Profile, bufSize, volume, recSize int, dir string) sample {
	ep, err := connect(t, p, dir)
	if err != nil {
		return sample{Err: err.Error()}
	}
	defer ep.cleanup()
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
	go func() { wr <- writeAll(ep.w, bufSize, volume, recSize) }()
	w := <-wr
	r := <-rd
	if w.err != nil {
		return sample{Err: w.err.Error()}
	}
	if r.err != nil {
		return sample{Err: fmt.Sprintf("read: %v", r.err)}
	}
	s := sample{ElapsedNs: r.end - w.start, Received: r.n, Flushes: w.flushes, WriteSyscalls: w.syscalls,
		PartialWrites: w.partial, SyscwThread: w.syscwThread, SyscwProcess: w.syscwProcess}
	if r.n != int64(volume) {
		s.Err = fmt.Sprintf("reader got %d bytes, writer sent %d", r.n, volume)
	}
	return s
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
// fault in between. The socket pairs are rawchan's; TCP keeps Nagle on,
// as a plain socket has it (seed 003's writer did not set TCP_NODELAY).
// Faults on the nftables engine are already in the namespace this runs in
// (the netns child): plain TCP there.
func connect(t string, p Profile, dir string) (*endpoints, error) {
	switch t {
	case rawchan.UnixStream:
		w, r, _, err := rawchan.Dial(rawchan.UnixStream)
		if err != nil {
			return nil, err
		}
		return &endpoints{w: w, r: r, cleanup: func() { unix.Close(r) }}, nil
	case "fifo":
		p := filepath.Join(dir, "bufsweep.fifo")
		os.Remove(p)
		if err := unix.Mkfifo(p, 0o600); err != nil {
			return nil, fmt.Errorf("mkfifo: %w", err)
		}
		r, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open fifo for reading: %w", err)
		}
		w, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.SetNonblock(r, false)
		}
		if err != nil {
			unix.Close(r)
			return nil, fmt.Errorf("open fifo for writing: %w", err)
		}
		return &endpoints{w: w, r: r, cleanup: func() { unix.Close(r); os.Remove(p) }}, nil
	case rawchan.TCP:
		o := rawchan.TCPOptions{Nagle: true}
		if p.Engine == EngineToxiproxy {
			o.Via = toxiproxyVia(p)
		}
		w, r, stop, err := rawchan.DialTCP(o)
		if err != nil {
			return nil, err
		}
		return &endpoints{w: w, r: r, cleanup: func() { unix.Close(r); stop() }}, nil
	}
	return nil, fmt.Errorf("%w: unknown transport %q", ErrBadOptions, t)
}

// Tables are bufsweep's tables: throughput with its spread and the fault
// engine of each row; the write syscalls behind it; and, when loss rows
// ran, the kernel's proof that the loss happened.
func Tables(rows []Row) []bench.TitledTable {
	tput := &bench.Table{Header: []string{"transport", "fault", "engine", "buffer", "volume", "runs", "MB/s", "MB/s min", "MB/s max", "elapsed"}}
	calls := &bench.Table{Header: []string{"transport", "fault", "buffer", "flushes", "write()", "partial", "syscw thr", "syscw proc"}}
	loss := &bench.Table{Header: []string{"fault", "buffer", "runs", "tcp packets", "dropped", "dropped %", "retransmits"}}
	for _, r := range rows {
		if r.Runs == 0 {
			continue // not measured: the notes say why
		}
		tput.Add(r.Transport, r.Fault, r.Engine, bench.FormatSize(r.Buffer), bench.FormatSize(r.Volume), r.Runs,
			fmt.Sprintf("%.1f", r.MBps), fmt.Sprintf("%.1f", r.MBpsMin), fmt.Sprintf("%.1f", r.MBpsMax), bench.FormatNs(float64(r.ElapsedNs)))
		calls.Add(r.Transport, r.Fault, bench.FormatSize(r.Buffer), r.Flushes, r.WriteSyscalls, r.PartialWrites, r.SyscwThread, r.SyscwProcess)
		if r.Engine == EngineNftNetns {
			pct := "-"
			if r.TCPPackets > 0 {
				pct = fmt.Sprintf("%.2f%%", 100*float64(r.Dropped)/float64(r.TCPPackets))
			}
			loss.Add(r.Fault, bench.FormatSize(r.Buffer), r.Runs, r.TCPPackets, r.Dropped, pct, r.Retransmits)
		}
	}
	ts := []bench.TitledTable{
		{Title: "the same volume through each write buffer size (MB/s: median and spread over runs)", Table: tput},
		{Title: "write syscalls of the median run", Table: calls},
	}
	if len(loss.Rows) > 0 {
		ts = append(ts, bench.TitledTable{Title: "packet loss the kernel applied (nftables counters and TcpRetransSegs in the private namespace, summed over runs)", Table: loss})
	}
	return ts
}
