// Package conns measures what idle connections cost the aggregator: N idle
// unix stream or TCP connections are held open while producers send flat
// out, and the aggregator's threads, RSS and descriptors are read from
// /proc next to the records/s and loss that package throughput accounts
// for by sequence number (issue 12, item 2).
//
//	per cell (transport × idle count), per pass:
//	  raise RLIMIT_NOFILE (soft and hard) → start the aggregator (--max-conns 0), which inherits it
//	  open N idle connections from this process, until its logagg_connections counts N
//	  producers flat out for Duration (throughput.Measure), threads and RSS sampled every 50 ms
//	  read fds, close the idle connections, wait until it counts 0, read threads again
//
// Each row is compared with the 0-idle row of its transport: records/s
// within RateTolerance, RSS growth per idle connection within
// RSSPerConnBound, and threads within ThreadBound.
package conns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/harness"
	"github.com/ipclab/logagg/internal/bench/throughput"
)

// Kind is the subcommand and result kind of the idle-connections
// experiment.
const Kind = "conns"

// Transports are the stream transports conns knows, in default order.
var Transports = []string{"unixsock", "tcp"}

// Default and quick idle counts: one row without idle connections (the
// base the others are compared with) and the counts of the issue.
var (
	DefaultIdle = []int{0, 10000, 50000}
	QuickIdle   = []int{0, 1000}
)

// The targets.
const (
	// RateTolerance: records/s with idle connections held may be this
	// fraction below the 0-idle row.
	RateTolerance = 0.10
	// RSSPerConnBound is the RSS an idle connection may add, in bytes.
	RSSPerConnBound = 2048
)

// ThreadBound is the most threads the aggregator may have with gomaxprocs
// Ps: 4×GOMAXPROCS+16.
func ThreadBound(gomaxprocs int) int { return 4*gomaxprocs + 16 }

// fdMargin is the descriptors a cell asks for besides twice the idle
// connections: the producers' connections, the output, the listeners, the
// metrics endpoint and Go's own, with room to spare (the aggregator
// briefly holds two descriptors of a connection it sets up). When the
// limit cannot be raised that far, the cell holds as many idle
// connections as leave cappedMargin descriptors free, which is still
// several times what the two processes use besides them (about 30 each).
const (
	fdMargin     = 4096
	cappedMargin = 256
)

// ErrBadOptions is returned (wrapped) for invalid Options.
var ErrBadOptions = errors.New("bad conns options")

// Options configure Run. Validate fills zero fields with the defaults
// (the quick ones when Quick is set).
type Options struct {
	Idle       []int    // idle connection counts, one row each; default DefaultIdle (quick QuickIdle)
	Transports []string // default Transports
	Producers  int      // flat-out producers per row; default 1
	Size       int      // record size in bytes; default 100
	// Duration is how long the producers send in each row; default 5s
	// (quick 1s).
	Duration time.Duration
	// Runs is how many passes are made over the grid, one after another;
	// each row is its cell's median pass by records/s. Default 1.
	Runs int
	// CPUs places the processes as throughput.Spec.CPUs does: "" or "any",
	// "same" or "split".
	CPUs  string
	Quick bool

	AggregatorBin, ProducerBin string // required
	Progress                   *bench.Progress
	// Stderr receives the aggregator's log lines (nil: kept for errors).
	Stderr io.Writer
}

// Validate fills the defaults into zero fields and checks the rest.
func (o *Options) Validate() error {
	if len(o.Idle) == 0 {
		o.Idle = DefaultIdle
		if o.Quick {
			o.Idle = QuickIdle
		}
	}
	if len(o.Transports) == 0 {
		o.Transports = Transports
	}
	if o.Producers == 0 {
		o.Producers = 1
	}
	if o.Size == 0 {
		o.Size = 100
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
		if o.Quick {
			o.Duration = time.Second
		}
	}
	if o.Runs == 0 {
		o.Runs = 1
	}
	for _, t := range o.Transports {
		if !slices.Contains(Transports, t) {
			return fmt.Errorf("%w: transport %q: idle connections are %s", ErrBadOptions, t, strings.Join(Transports, " or "))
		}
	}
	for _, n := range o.Idle {
		if n < 0 {
			return fmt.Errorf("%w: idle count %d", ErrBadOptions, n)
		}
	}
	switch {
	case o.Producers < 1:
		return fmt.Errorf("%w: producers %d: want at least 1", ErrBadOptions, o.Producers)
	case o.Size < 1:
		return fmt.Errorf("%w: size %d", ErrBadOptions, o.Size)
	case o.Duration < 0:
		return fmt.Errorf("%w: duration %v", ErrBadOptions, o.Duration)
	case o.Runs < 1:
		return fmt.Errorf("%w: runs %d: want at least 1", ErrBadOptions, o.Runs)
	case o.AggregatorBin == "" || o.ProducerBin == "":
		return fmt.Errorf("%w: the aggregator and producer binaries are required", ErrBadOptions)
	}
	if err := throughput.ValidCPUs(o.CPUs); err != nil {
		return fmt.Errorf("%w: %w", ErrBadOptions, err)
	}
	return nil
}

// Params is what a Result records about the run.
type Params struct {
	Idle       []int    `json:"idle"`
	Transports []string `json:"transports"`
	Producers  int      `json:"producers"`
	Size       int      `json:"size"`
	Duration   string   `json:"duration"`
	Runs       int      `json:"runs"`
	CPUs       string   `json:"cpus,omitempty"`
	Quick      bool     `json:"quick,omitempty"`
}

// Row is one transport with one count of idle connections.
type Row struct {
	Transport string `json:"transport"`
	Idle      int    `json:"idle"` // idle connections asked for
	// Held is the aggregator's logagg_connections for the listener once
	// the idle connections were open, before the producers started.
	Held int64 `json:"held"`
	// Capped: fewer were opened than asked, because RLIMIT_NOFILE could
	// not be raised far enough (Result.Notes says why).
	Capped bool `json:"capped,omitempty"`
	// SetupS is the time from the first idle connect until the
	// aggregator counted them all.
	SetupS    float64 `json:"setup_s"`
	Producers int     `json:"producers"`
	Size      int     `json:"size"`

	// From throughput's accounting of the producers' records.
	Sent        int64   `json:"sent"`
	Written     int64   `json:"written"`
	Lost        int64   `json:"lost"`
	RecordsPerS float64 `json:"records_per_s"`
	// DaemonCPUNs is the aggregator's CPU over the records written,
	// including what it spent accepting the idle connections; RunCPUNs
	// only what it spent from the producers' start to the end of their
	// run (/proc/PID/stat, 10 ms resolution): the cost of a record with
	// the idle connections held, which the machine's noise moves less
	// than records/s.
	DaemonCPUNs float64 `json:"daemon_cpu_ns_per_record"`
	RunCPUNs    float64 `json:"run_cpu_ns_per_record"`
	ProdCPUNs   float64 `json:"producer_cpu_ns_per_record"`

	// The aggregator's threads (/proc/PID/status Threads).
	GOMAXPROCS  int `json:"gomaxprocs"`
	ThreadBound int `json:"thread_bound"`
	ThreadsIdle int `json:"threads_idle"` // the idle connections open, before the producers
	// Threads is the peak over the cell: while the idle connections were
	// opened and while the producers ran.
	Threads int `json:"threads"`
	// ThreadsAfterClose: once the idle (and the producers') connections
	// were closed and the aggregator counted none.
	ThreadsAfterClose int `json:"threads_after_close"`

	// The aggregator's memory (/proc/PID/status), in KiB.
	IdleRSSKiB  int64 `json:"idle_rss_kib"` // VmRSS, the idle connections open, before the producers
	RSSKiB      int64 `json:"rss_kib"`      // peak VmRSS while the producers ran
	HWMKiB      int64 `json:"hwm_kib"`      // VmHWM at the end: the peak of the whole cell
	RSSCloseKiB int64 `json:"rss_after_close_kib"`

	// FDs is the aggregator's descriptor count at the end, before the
	// idle connections were closed; FDLimit its soft RLIMIT_NOFILE
	// (/proc/PID/limits).
	FDs     int    `json:"fds"`
	FDLimit uint64 `json:"fd_limit"`

	// Filled by Compare from the 0-idle row of the same transport.
	VsNoIdle float64 `json:"vs_no_idle,omitempty"` // records/s over the 0-idle row's
	// RSSPerConn is (RSSKiB - the 0-idle row's RSSKiB) / Held, in bytes;
	// IdleRSSPerConn the same with IdleRSSKiB.
	RSSPerConn     float64 `json:"rss_bytes_per_idle_conn,omitempty"`
	IdleRSSPerConn float64 `json:"idle_rss_bytes_per_idle_conn,omitempty"`
	// Compared says there was a 0-idle row to compare with; Missed names
	// the targets missed (held, threads, rate, rss, lost, error).
	Compared bool     `json:"compared"`
	Missed   []string `json:"missed,omitempty"`

	Error string `json:"error,omitempty"`
}

// Result is what Run returns.
type Result struct {
	Params Params
	Rows   []Row
	Notes  []string
}

// connCounter is a running daemon that reports its open connections per
// transport (our aggregator, from its metrics).
type connCounter interface {
	Connections() map[string]int64
}

// Run measures every transport × idle count, Runs times over.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	lim, err := newFDLimit()
	if err != nil {
		return nil, err
	}
	defer lim.restore()
	res := &Result{Params: Params{Idle: o.Idle, Transports: o.Transports, Producers: o.Producers, Size: o.Size,
		Duration: o.Duration.String(), Runs: o.Runs, CPUs: o.CPUs, Quick: o.Quick}}
	// Each pass measures every cell once, so that the machine's noise is
	// spread over all cells rather than hitting one cell's repeats.
	type cell struct {
		t      string
		idle   int
		passes []Row
	}
	var cells []*cell
	for _, t := range o.Transports {
		for _, n := range o.Idle {
			cells = append(cells, &cell{t: t, idle: n})
		}
	}
	var maxLimit uint64
	capped := false
	for pass := range o.Runs {
		for _, c := range cells {
			o.Progress.SetLabel(fmt.Sprintf("%s idle=%d pass %d", c.t, c.idle, pass+1))
			row, err := runCell(ctx, &o, lim, c.t, c.idle)
			o.Progress.Add(1)
			if err != nil {
				if ctx.Err() != nil {
					return res, ctx.Err()
				}
				res.Notes = append(res.Notes, fmt.Sprintf("pass %d, %s with %d idle: %v", pass+1, c.t, c.idle, err))
				if row == nil {
					continue
				}
				row.Error = err.Error()
			}
			maxLimit = max(maxLimit, row.FDLimit)
			capped = capped || row.Capped
			c.passes = append(c.passes, *row)
		}
	}
	for _, c := range cells {
		ok := slices.DeleteFunc(slices.Clone(c.passes), func(r Row) bool { return r.Error != "" })
		if len(ok) == 0 {
			ok = c.passes // every pass failed: show one, with its error
		}
		if len(ok) > 0 {
			res.Rows = append(res.Rows, throughput.MedianBy(ok, func(r Row) float64 { return r.RecordsPerS }))
		}
	}
	Compare(res.Rows)

	res.Notes = append(res.Notes,
		fmt.Sprintf("RLIMIT_NOFILE: ipcbench set its soft and hard limits per cell to 2×idle+%d, at least the %d/%d it started with and at most fs.nr_open=%d, before starting the aggregator, which inherited them: the fd limit column is the aggregator's own (/proc/PID/limits), up to %d here",
			fdMargin, lim.orig.Cur, lim.orig.Max, lim.nrOpen, maxLimit),
		"the aggregator runs with --max-conns 0 (no per-listener limit) and a --memory whose connections' share holds every idle connection (docs/memory.md); idle connections are opened by ipcbench itself, never written to, until the aggregator's logagg_connections for the listener counts them all (held)",
		fmt.Sprintf("idle TCP connections come from 127.0.0.1, 127.0.0.2, ... (%d per source address; loopback has ~28k ephemeral ports per source and destination)", perSource),
		fmt.Sprintf("thread bound 4×GOMAXPROCS+16 with GOMAXPROCS=%d (this process's, which the aggregator inherits with the environment and the CPU set); threads is the peak over the cell, while the idle connections were opened and while the producers ran, sampled every %v", runtime.GOMAXPROCS(0), sampleEvery),
		"RSS is the aggregator's peak VmRSS while the producers ran, idle RSS its VmRSS once the idle connections were open, before the producers started; B/conn is RSS minus the 0-idle row's, over the connections held, and idle B/conn the same with idle RSS; targets: records/s at least 90% of the 0-idle row's, B/conn at most 2048, threads within the bound (peak and after close), every idle connection held, nothing lost")
	if capped {
		why := "this process may not raise its hard limit: it is not root"
		if os.Geteuid() == 0 {
			why = "this process may not raise its hard limit: it runs as root but without CAP_SYS_RESOURCE (not in its bounding set: a container or sandbox dropped it), so setrlimit refused (EPERM)"
			if hasCapSysResource() {
				why = "fs.nr_open is lower"
			}
		}
		res.Notes = append(res.Notes, fmt.Sprintf("CAPPED: some cells hold fewer idle connections than asked (held < idle): RLIMIT_NOFILE could not be raised to 2×idle+%d because %s; those cells open as many as leave %d descriptors under the limit (the fd limit column), and the aggregator, which needs a descriptor per connection, can hold no more",
			fdMargin, why, cappedMargin))
	}
	res.Notes = append(res.Notes, noiseNotes(res.Rows)...)
	if o.Runs > 1 {
		res.Notes = append(res.Notes, fmt.Sprintf("each row is the median of %d passes by records/s (its other columns come from that pass)", o.Runs))
	}
	return res, nil
}

// whoIsLeft describes what the aggregator still holds when it counts
// connections it should not: its descriptors, and for TCP the peers of
// the sockets on the listener's port, so that a connection from another
// process can be told from one of ours it failed to close.
func whoIsLeft(pid int, listenURL string) string {
	s := ""
	if n, err := countFDs(pid); err == nil {
		s = fmt.Sprintf("; it has %d descriptors", n)
	}
	u, err := url.Parse(listenURL)
	if err != nil || u.Scheme != "tcp" {
		return s
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return s
	}
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return s
	}
	peers := tcpPeersOf(b, port)
	if len(peers) > 10 {
		peers = append(peers[:10], fmt.Sprintf("... %d in all", len(peers)))
	}
	return s + fmt.Sprintf("; TCP sockets on port %d: %s", port, strings.Join(peers, ", "))
}

// noiseNotes say how much RSS the producers alone add in each 0-idle row
// (batches queued for the writer, up to --queue-batches × --batch-bytes,
// and the garbage collector's headroom), spread over the connections of
// the other rows: a B/conn difference smaller than that is noise.
func noiseNotes(rows []Row) []string {
	var notes []string
	for _, b := range rows {
		if b.Idle != 0 || b.Error != "" || b.RSSKiB <= b.IdleRSSKiB {
			continue
		}
		var per []string
		for _, r := range rows {
			if r.Transport == b.Transport && r.Held > 0 {
				per = append(per, fmt.Sprintf("%.0f B/conn at %d held", float64(b.RSSKiB-b.IdleRSSKiB)*1024/float64(r.Held), r.Held))
			}
		}
		if len(per) > 0 {
			notes = append(notes, fmt.Sprintf("%s: with no idle connections the producers alone raised RSS by %.1f MiB (idle RSS to RSS), which is %s: B/conn differences smaller than that are noise",
				b.Transport, float64(b.RSSKiB-b.IdleRSSKiB)/1024, strings.Join(per, ", ")))
		}
	}
	return notes
}

// runCell measures one transport with n idle connections. It returns the
// row with an error when the cell measured something before failing.
func runCell(ctx context.Context, o *Options, lim *fdLimit, t string, n int) (*Row, error) {
	row := &Row{Transport: t, Idle: n, Producers: o.Producers, Size: o.Size, GOMAXPROCS: runtime.GOMAXPROCS(0)}
	row.ThreadBound = ThreadBound(row.GOMAXPROCS)
	limit, capped, err := lim.set(uint64(2*n + fdMargin))
	if err != nil {
		return nil, err
	}
	open := n
	if capped {
		open = min(n, max(0, int(limit)-cappedMargin))
		row.Capped = open < n
	}
	dir, err := os.MkdirTemp("", "lgcn")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	var (
		idle    *idleSet
		smp     *sampler
		endErr  error
		started bool
		runCPU  time.Duration // the aggregator's, while the producers ran
	)
	defer func() {
		idle.close()
		smp.close()
	}()
	spec := throughput.Spec{
		AggregatorBin: o.AggregatorBin, ProducerBin: o.ProducerBin, Dir: dir, Transports: []string{t},
		Producers: o.Producers, Size: o.Size, Duration: o.Duration, CPUs: o.CPUs, Stderr: o.Stderr,
		ExtraArgs: []string{"--max-conns", "0", "--memory", strconv.FormatInt(memoryFor(n), 10)},
		AfterStart: func(ctx context.Context, d harness.Running) error {
			started = true
			cc, ok := d.(connCounter)
			if !ok {
				return errors.New("the daemon does not report its connections")
			}
			pid := d.Pid()
			var err error
			if row.FDLimit, _, err = readNoFileLimit(pid); err != nil {
				return err
			}
			smp = startSampler(pid)
			begin := time.Now()
			idle, err = openIdle(ctx, d.URL(t), open, func() (int64, error) { return cc.Connections()[t], nil })
			row.SetupS = time.Since(begin).Seconds()
			row.Held = cc.Connections()[t]
			now, peak, serr := smp.take()
			row.ThreadsIdle, row.IdleRSSKiB, row.Threads = now.Threads, now.RSSKiB, peak.Threads
			cpu, cerr := readCPU(pid)
			runCPU = -cpu
			return errors.Join(err, serr, cerr)
		},
		BeforeStop: func(d harness.Running) {
			cpu, err := readCPU(d.Pid())
			runCPU += cpu
			endErr = errors.Join(err, finishCell(d, row, smp, idle, t))
		},
	}
	r, err := throughput.Measure(ctx, spec)
	if r != nil && len(r.Rows) == 1 {
		tr := r.Rows[0]
		row.Sent, row.Written, row.Lost, row.RecordsPerS = tr.Sent, tr.Written, tr.Lost, tr.RecordsPerS
		row.DaemonCPUNs, row.ProdCPUNs = tr.DaemonCPUNs, tr.ProdCPUNs
		if tr.Written > 0 {
			row.RunCPUNs = float64(runCPU.Nanoseconds()) / float64(tr.Written)
		}
	}
	err = errors.Join(err, endErr)
	if r == nil && !started {
		return nil, err
	}
	return row, err
}

// finishCell reads the aggregator's state at the end of the producers'
// run, closes the idle connections and reads its threads once it has
// closed them all.
func finishCell(d harness.Running, row *Row, smp *sampler, idle *idleSet, t string) error {
	pid := d.Pid()
	now, peak, err := smp.take()
	smp.close()
	row.Threads = max(row.Threads, peak.Threads)
	row.RSSKiB, row.HWMKiB = peak.RSSKiB, now.HWMKiB
	fds, ferr := countFDs(pid)
	row.FDs = fds
	idle.close()
	// The producers have exited; once the idle connections are gone too
	// the aggregator has nothing open on the listener.
	cc := d.(connCounter)
	deadline := time.Now().Add(stallLimit)
	left := cc.Connections()[t]
	for left > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		left = cc.Connections()[t]
	}
	var cerr error
	if left > 0 {
		cerr = fmt.Errorf("the aggregator still counts %d connections %v after the idle ones were closed%s", left, stallLimit, whoIsLeft(pid, d.URL(t)))
	}
	st, serr := readStatus(pid)
	row.ThreadsAfterClose, row.RSSCloseKiB = st.Threads, st.RSSKiB
	row.Threads = max(row.Threads, st.Threads)
	return errors.Join(err, ferr, cerr, serr)
}

// memoryFor is a --memory under which the aggregator accepts n idle
// connections: its connections' share (3/16 of the budget without the
// 8 MiB kept for code, docs/memory.md) at 2 KiB a connection, and at least
// the default 32 MiB.
func memoryFor(n int) int64 {
	const perConn, code = 2 << 10, 8 << 20
	return max(32<<20, code+int64(n+64)*perConn*16/3)
}
