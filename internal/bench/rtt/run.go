package rtt

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/cref"
	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/rawchan"
)

// Placements: where the two sides of a row run.
const (
	PlaceSame     = bench.PlaceSame     // both sides pinned to the first CPU
	PlaceCross    = bench.PlaceCross    // measuring side on the first CPU, echo side on the second
	PlaceUnpinned = bench.PlaceUnpinned // the scheduler decides; where each side ran is still recorded
)

// Scheduling classes for Options.Sched.
const (
	SchedOther = "other" // SCHED_OTHER, the default
	SchedFIFO  = "fifo"  // SCHED_FIFO at FIFOPriority on both sides
)

// Pin modes: which scheduling entity carries a row's CPU affinity.
const (
	PinThread  = "thread"  // each side's measuring thread (Go rows)
	PinProcess = "process" // each single-threaded side process (C rows)
	PinNone    = "none"    // unpinned
)

// ErrBadOptions is returned (wrapped) for invalid Options.
var ErrBadOptions = errors.New("bad rtt options")

// Options configure Run. Zero values take the documented defaults.
type Options struct {
	Mechanisms []string // default AllMechanisms
	Sizes      []int    // payload bytes; default {100}
	Iterations int      // timed round trips per row; default 100000
	Warmup     int      // untimed round trips first; default Iterations/10 (max 10000)
	// Placements to measure every mechanism in: PlaceSame, PlaceCross,
	// PlaceUnpinned. Default: same and cross (same alone, with a Note, when
	// only one CPU is allowed).
	Placements []string
	// CPUs the sides are placed on: the first for the measuring side (and
	// for both in "same"), the second for the echo side in "cross".
	// Default: the CPUs this thread may run on.
	CPUs  []int
	Sched string // SchedOther (default) or SchedFIFO; a refusal is a Note, not an error
	// GoSyscalls makes both Go sides use unix.Read/unix.Write-style
	// runtime-aware syscalls instead of raw ones, to show what the
	// runtime's syscall bookkeeping costs (see rawchan.IO.Raw).
	GoSyscalls bool
	// CRef adds the C reference rows "c:pipe" and "c:unixsock" (built with
	// gcc, see package cref) beside every "pipe"/"unixsock" row, in the
	// same placement.
	CRef bool
	// Exe and EchoArgs start the echo side: Exe EchoArgs... --mech ...
	// Defaults: /proc/self/exe and {EchoSubcommand}.
	Exe      string
	EchoArgs []string
	// Samples, if set, receives every sample as CSV
	// "mechanism,size,iteration,ns" with a header line; the mechanism
	// field is "<mechanism>@<placement>" (pipe@cross) so that every row is
	// its own series.
	Samples  io.Writer
	Progress *bench.Progress
}

// Params is the Options subset recorded in the Result.
type Params struct {
	Mechanisms []string `json:"mechanisms"`
	Sizes      []int    `json:"sizes"`
	Iterations int      `json:"iterations"`
	Warmup     int      `json:"warmup"`
	Placements []string `json:"placements"`
	CPUs       []int    `json:"cpus"` // the CPUs placements used (first, second)
	Sched      string   `json:"sched"`
	// RTLimit is the kernel's real-time throttling budget at the time of
	// the run (nil if unreadable).
	RTLimit    *RTLimit `json:"rt_limit,omitempty"`
	GoSyscalls bool     `json:"go_syscalls"`
	CRef       bool     `json:"c_reference"`
}

// Side says where one side of a row ran and how often it was switched out
// during the timed part.
type Side struct {
	PID       int    `json:"pid"`
	Affinity  []int  `json:"affinity,omitempty"`
	CPUStart  int    `json:"cpu_start"`
	CPUEnd    int    `json:"cpu_end"`
	SchedFIFO string `json:"sched_fifo"` // "off", "ok" or "refused: reason"
	VolCS     int64  `json:"vol_cs"`
	InvolCS   int64  `json:"invol_cs"`
}

// Row is one mechanism at one size in one placement.
type Row struct {
	Mechanism string `json:"mechanism"`
	Impl      string `json:"impl"` // "go" or "c"
	Size      int    `json:"size"`
	// Placement is PlaceSame, PlaceCross or PlaceUnpinned, and CPUs the
	// CPUs the sides were pinned to: measuring side first, then the echo
	// side (one CPU for a one-thread row, none unpinned).
	Placement string `json:"placement"`
	CPUs      []int  `json:"cpus,omitempty"`
	PinMode   string `json:"pin_mode"` // PinThread, PinProcess or PinNone
	// Sched is the class both sides ran in: "other", "fifo:<priority>", or
	// "other (fifo refused)" when SCHED_FIFO was asked for and a side was
	// refused it (the Side says why).
	Sched      string        `json:"sched"`
	Iterations int           `json:"iterations"`
	Stats      bench.Summary `json:"stats_ns"`
	// TSCPerNs is the time-stamp counter's rate over this row's timed part
	// (0 where it was not read); Stats times TSCPerNs are TSC cycles, the
	// unit of seed 001.
	TSCPerNs float64 `json:"tsc_per_ns,omitempty"`
	Parent   Side    `json:"parent"`
	Child    *Side   `json:"child,omitempty"`
	// RatioToC is this Go row's median over the C reference row's median
	// for the same mechanism, size and placement, measured in the same run.
	RatioToC float64 `json:"ratio_to_c,omitempty"`
	// MaxLikelyRTThrottle: a SCHED_FIFO row whose maximum is at least half
	// the kernel's real-time throttling pause (see RTLimit).
	MaxLikelyRTThrottle bool `json:"max_likely_rt_throttle,omitempty"`
	// Error is set when the row could not be measured (e.g. a size above a
	// kernel limit); the other fields are then empty.
	Error   string    `json:"error,omitempty"`
	Samples []float64 `json:"-"`
}

// Result is what Run returns.
type Result struct {
	Params Params
	Rows   []Row
	Notes  []string
}

// Validate reports the first invalid option; zero values are valid.
func (o *Options) Validate() error {
	for _, m := range o.Mechanisms {
		if !slices.Contains(AllMechanisms, m) {
			return fmt.Errorf("%w: %w: %q (known: %v)", ErrBadOptions, ErrUnknownMechanism, m, AllMechanisms)
		}
	}
	for _, s := range o.Sizes {
		if s < 1 {
			return fmt.Errorf("%w: size %d < 1", ErrBadOptions, s)
		}
	}
	if o.Iterations < 0 || o.Warmup < 0 {
		return fmt.Errorf("%w: iterations %d, warmup %d", ErrBadOptions, o.Iterations, o.Warmup)
	}
	for _, p := range o.Placements {
		if p != PlaceSame && p != PlaceCross && p != PlaceUnpinned {
			return fmt.Errorf("%w: placement %q (want same, cross or unpinned)", ErrBadOptions, p)
		}
	}
	if o.Sched != "" && o.Sched != SchedOther && o.Sched != SchedFIFO {
		return fmt.Errorf("%w: sched %q (want other or fifo)", ErrBadOptions, o.Sched)
	}
	return nil
}

func (o *Options) fill() error {
	if err := o.Validate(); err != nil {
		return err
	}
	if len(o.Mechanisms) == 0 {
		o.Mechanisms = AllMechanisms
	}
	if len(o.Sizes) == 0 {
		o.Sizes = []int{100}
	}
	if o.Iterations == 0 {
		o.Iterations = 100000
	}
	if o.Warmup == 0 {
		o.Warmup = min(o.Iterations/10, 10000)
	}
	if o.Sched == "" {
		o.Sched = SchedOther
	}
	if len(o.CPUs) == 0 {
		cpus, err := allowedCPUs()
		if err != nil {
			return err
		}
		o.CPUs = cpus
	}
	if o.Exe == "" {
		o.Exe = "/proc/self/exe"
	}
	if o.EchoArgs == nil {
		o.EchoArgs = []string{EchoSubcommand}
	}
	return nil
}

// schedName is the class a row asked for, as Row.Sched spells it.
func (o *Options) schedName() string {
	if o.Sched == SchedFIFO {
		return fmt.Sprintf("fifo:%d", FIFOPriority)
	}
	return SchedOther
}

// epoch anchors mono: time.Since on a Time with a monotonic reading costs
// one clock read (time.Now costs two: wall and monotonic).
var epoch = time.Now()

func mono() int64 { return int64(time.Since(epoch)) }

// Run measures every mechanism at every size in every placement. Rows that
// cannot run (a limit, a missing compiler) carry Error and a Note; Run
// itself fails only on bad options, a cancelled ctx or a broken Samples
// writer.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	plan, notes, err := planPlacements(o.Placements, o.CPUs)
	if err != nil {
		return nil, err
	}
	res := &Result{Params: Params{Mechanisms: o.Mechanisms, Sizes: o.Sizes, Iterations: o.Iterations,
		Warmup: o.Warmup, Sched: o.schedName(), GoSyscalls: o.GoSyscalls, CRef: o.CRef,
		CPUs: []int{plan[0].parent, plan[len(plan)-1].child}}, Notes: notes}
	for _, p := range plan {
		res.Params.Placements = append(res.Params.Placements, p.name)
	}
	rt, rtKnown := readRTLimit()
	if rtKnown {
		res.Params.RTLimit = &rt
	}
	note := func(f string, a ...any) { res.Notes = append(res.Notes, fmt.Sprintf(f, a...)) }
	var cbin string
	if o.CRef {
		if cbin, err = cref.Build(cref.PingPong); err != nil {
			note("C reference unavailable, no c: rows: %v", err)
		}
	}
	var csv *bufio.Writer
	if o.Samples != nil {
		csv = bufio.NewWriterSize(o.Samples, 1<<16)
		csv.WriteString("mechanism,size,iteration,ns\n")
	}
	fifoNoted := map[string]bool{}
	unfit := map[string][]string{} // placement: mechanisms it has no row for
	for _, size := range o.Sizes {
		for _, mech := range o.Mechanisms {
			for _, pl := range plan {
				if err := ctx.Err(); err != nil {
					return res, err
				}
				if !pl.fits(mech) {
					if !slices.Contains(unfit[pl.name], mech) {
						unfit[pl.name] = append(unfit[pl.name], mech)
					}
					continue
				}
				o.Progress.SetLabel(mech + " " + bench.FormatSize(size) + " " + pl.name)
				row := measureGo(ctx, &o, mech, size, pl)
				if row.Error != "" {
					note("%s %d B %s not measured: %s", mech, size, pl.name, row.Error)
				}
				for _, s := range []*Side{&row.Parent, row.Child} {
					if s != nil && strings.HasPrefix(s.SchedFIFO, "refused") && !fifoNoted[s.SchedFIFO] {
						fifoNoted[s.SchedFIFO] = true
						note("SCHED_FIFO %s; continued under SCHED_OTHER", s.SchedFIFO)
					}
				}
				res.Rows = append(res.Rows, row)
				if err := writeSamples(csv, &row); err != nil {
					return res, err
				}
				if cbin == "" || (mech != MechPipe && mech != MechUnixSock) || row.Error != "" {
					continue
				}
				crow := measureC(ctx, &o, cbin, mech, size, pl)
				if crow.Error != "" {
					note("c:%s %d B %s failed: %s", mech, size, pl.name, crow.Error)
				} else if crow.Stats.Median > 0 {
					res.Rows[len(res.Rows)-1].RatioToC = row.Stats.Median / crow.Stats.Median
				}
				res.Rows = append(res.Rows, crow)
				if err := writeSamples(csv, &crow); err != nil {
					return res, err
				}
			}
		}
	}
	for _, pl := range plan {
		if m := unfit[pl.name]; len(m) > 0 {
			note("no %s rows for %s: they run in one thread or on one CPU by definition", pl.name, strings.Join(m, ", "))
		}
	}
	if csv != nil {
		if err := csv.Flush(); err != nil {
			return res, fmt.Errorf("write samples: %w", err)
		}
	}
	if o.Sched == SchedFIFO && rtKnown {
		res.Notes = append(res.Notes, markRTThrottling(res.Rows, rt)...)
	}
	return res, nil
}

// markRTThrottling flags the SCHED_FIFO rows whose maximum a throttling
// pause explains, and returns the notes that say so. Under throttling the
// kernel stops every real-time task of a CPU for PeriodUs-RuntimeUs of
// each period once they used RuntimeUs; a side that busy-polls (shm-spin,
// the one-core yield loops) uses its budget up and both sides stall.
func markRTThrottling(rows []Row, l RTLimit) []string {
	if !l.throttles() {
		return nil
	}
	us := func(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
	pause := us(l.PeriodUs - l.RuntimeUs)
	notes := []string{fmt.Sprintf("RT throttling is on (sched_rt_runtime_us=%d of sched_rt_period_us=%d): "+
		"a busy-polling SCHED_FIFO side may be stopped for %v every %v; maxima of %v or more are marked "+
		"%q as likely throttling, not the mechanism (echo -1 > /proc/sys/kernel/sched_rt_runtime_us lifts it)",
		l.RuntimeUs, l.PeriodUs, pause, us(l.PeriodUs), pause/2, strings.TrimSpace(rtThrottleMark))}
	var flagged []string
	for i := range rows {
		r := &rows[i]
		if r.Error == "" && strings.HasPrefix(r.Sched, SchedFIFO+":") && l.explainsMax(r.Stats.Max) {
			r.MaxLikelyRTThrottle = true
			flagged = append(flagged, fmt.Sprintf("%s %s %s (max %s)", r.Mechanism, bench.FormatSize(r.Size), r.Placement, bench.FormatNs(r.Stats.Max)))
		}
	}
	if len(flagged) > 0 {
		notes = append(notes, "max likely RT throttling: "+strings.Join(flagged, ", "))
	}
	return notes
}

func writeSamples(w *bufio.Writer, r *Row) error {
	if w == nil {
		return nil
	}
	var b []byte
	for i, v := range r.Samples {
		b = append(b[:0], r.Mechanism...)
		b = append(b, '@')
		b = append(b, r.Placement...)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(r.Size), 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(v), 10)
		b = append(b, '\n')
		if _, err := w.Write(b); err != nil {
			return fmt.Errorf("write samples: %w", err)
		}
	}
	return nil
}

// measureGo runs one Go row on fresh locked threads that die with the row.
func measureGo(ctx context.Context, o *Options, mech string, size int, pl placement) Row {
	out := make(chan Row, 1)
	go func() {
		// Never unlocked on purpose: when this goroutine returns, the
		// runtime discards the thread with its affinity and SCHED_FIFO.
		runtime.LockOSThread()
		var row Row
		var err error
		switch mech {
		case MechPipeInproc:
			row, err = measureInproc(o, size, pl.parent)
		case MechShmSerial:
			row, err = measureSerial(o, size, pl.parent)
		case MechShm1CoreThreads:
			row, err = measureThreads(o, size, pl.parent)
		default:
			row, err = measureChild(ctx, o, mech, size, pl.parent, pl.child)
		}
		if err != nil {
			row = Row{Error: err.Error()}
		} else {
			row.Sched = rowSched(o, row.Parent, row.Child)
		}
		row.Mechanism, row.Impl, row.Size = mech, "go", size
		row.Placement, row.CPUs, row.PinMode = pl.name, pl.cpus(mech), pl.pinMode("go")
		out <- row
	}()
	return <-out
}

// rowSched is Row.Sched: the class asked for if every side got it.
func rowSched(o *Options, parent Side, child *Side) string {
	if o.Sched != SchedFIFO {
		return SchedOther
	}
	if parent.SchedFIFO != "ok" || (child != nil && child.SchedFIFO != "ok") {
		return SchedOther + " (fifo refused)"
	}
	return o.schedName()
}

// prepareSelf pins and schedules the calling (locked) thread.
func prepareSelf(o *Options, cpu int) (Side, error) {
	s := Side{PID: os.Getpid(), SchedFIFO: "off"}
	if err := bench.PinThread(cpu); err != nil {
		return s, err
	}
	if o.Sched == SchedFIFO {
		s.SchedFIFO = trySchedFIFO()
	}
	s.Affinity = threadAffinity()
	return s, nil
}

func measureInproc(o *Options, size, cpu int) (Row, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return Row{}, fmt.Errorf("pipe: %w", err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	// Writing before reading in one thread deadlocks if the payload does not
	// fit in the pipe.
	if capa, err := unix.FcntlInt(uintptr(p[1]), unix.F_GETPIPE_SZ, 0); err == nil && size > capa {
		return Row{}, fmt.Errorf("size %d above pipe capacity %d", size, capa)
	}
	side, err := prepareSelf(o, cpu)
	if err != nil {
		return Row{}, err
	}
	return measuredRow(o, &streamConn{r: p[0], w: p[1], raw: !o.GoSyscalls}, size, side, nil)
}

// measuredRow runs pingLoop on c and makes the row of its samples.
func measuredRow(o *Options, c conn, size int, parent Side, child *Side) (Row, error) {
	samples, tscPerNs, err := pingLoop(o, c, make([]byte, size), &parent)
	if err != nil {
		return Row{}, err
	}
	return Row{Iterations: len(samples), Stats: bench.Summarize(samples), TSCPerNs: tscPerNs,
		Parent: parent, Child: child, Samples: samples}, nil
}

// pingLoop runs the warmup and timed round trips on c and fills in the
// measuring side's CPU and context-switch figures. It also returns the TSC
// rate over the timed part (0 without a TSC), read once before and once
// after so that the loop itself reads one clock per sample, as before.
func pingLoop(o *Options, c conn, buf []byte, side *Side) ([]float64, float64, error) {
	for i := 0; i < o.Warmup; i++ {
		if err := c.send(buf); err != nil {
			return nil, 0, fmt.Errorf("warmup %d: %w", i, err)
		}
		if err := c.recv(buf); err != nil {
			return nil, 0, fmt.Errorf("warmup %d: %w", i, err)
		}
	}
	samples := make([]float64, o.Iterations)
	side.CPUStart = bench.GetCPU()
	v0, i0 := threadCS()
	tsc0, mono0 := rdtsc(), mono()
	for i := range samples {
		t0 := mono()
		if err := c.send(buf); err != nil {
			return nil, 0, fmt.Errorf("round trip %d: %w", i, err)
		}
		if err := c.recv(buf); err != nil {
			return nil, 0, fmt.Errorf("round trip %d: %w", i, err)
		}
		samples[i] = float64(mono() - t0)
		if i&4095 == 4095 {
			o.Progress.Add(4096)
		}
	}
	tsc1, mono1 := rdtsc(), mono()
	v1, i1 := threadCS()
	side.CPUEnd = bench.GetCPU()
	side.VolCS, side.InvolCS = v1-v0, i1-i0
	var tscPerNs float64
	if haveTSC && mono1 > mono0 {
		tscPerNs = float64(tsc1-tsc0) / float64(mono1-mono0)
	}
	return samples, tscPerNs, nil
}

func measureChild(ctx context.Context, o *Options, mech string, size, parentCPU, childCPU int) (Row, error) {
	var abort atomic.Bool
	ch, err := setup(mech, size, &abort, !o.GoSyscalls)
	if err != nil {
		return Row{}, err
	}
	defer ch.cleanup()
	defer ch.parent.close()
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return Row{}, err
	}
	defer ctlR.Close()
	args := append(append([]string{}, o.EchoArgs...), "--mech", mech, "--size", itoa(size),
		"--count", itoa(o.Warmup+o.Iterations), "--warmup", itoa(o.Warmup), "--cpu", itoa(childCPU))
	if o.Sched == SchedFIFO {
		args = append(args, "--sched-fifo")
	}
	if o.GoSyscalls {
		args = append(args, "--go-syscalls")
	}
	args = append(args, ch.childArgs...)
	// Started before this thread is pinned: a child inherits the forking
	// thread's affinity and policy and must choose its own.
	echo, err := rawchan.ChildSpec{Exe: o.Exe, Args: args, Files: append([]*os.File{ctlW}, ch.childFiles...),
		OnExit: func() {
			abort.Store(true)
			ch.unblock()
		}}.Start(ctx)
	ch.childFiles = nil // Start closed them, ctlW with them
	if err != nil {
		return Row{}, err
	}
	fail := func(err error) (Row, error) { return Row{}, echo.Fail(err) }
	ctl := bufio.NewReader(ctlR)
	ready, err := readReport(ctl)
	if err != nil {
		return fail(fmt.Errorf("echo side not ready: %w", err))
	}
	if ch.afterReady != nil {
		if err := ch.afterReady(); err != nil {
			return fail(err)
		}
	}
	side, err := prepareSelf(o, parentCPU)
	if err != nil {
		return fail(err)
	}
	samples, tscPerNs, err := pingLoop(o, ch.parent, make([]byte, size), &side)
	if err != nil {
		// Kill first: a healthy child blocked in recv would never write
		// again, and a failed one has already written its reason.
		echo.Kill()
		if _, rerr := readReport(ctl); rerr != nil && !errors.Is(rerr, io.EOF) {
			err = fmt.Errorf("%w; echo side: %w", err, rerr)
		}
		return fail(err)
	}
	done, err := readReport(ctl)
	if err != nil {
		return fail(fmt.Errorf("echo side report: %w", err))
	}
	if werr := echo.Wait(); werr != nil {
		return Row{}, fmt.Errorf("echo side: %w: %s", werr, echo.Stderr())
	}
	child := &Side{PID: ready.PID, Affinity: ready.Affinity, CPUStart: ready.CPU, CPUEnd: done.CPU,
		SchedFIFO: ready.SchedFIFO, VolCS: done.VolCS, InvolCS: done.InvolCS}
	return Row{Iterations: len(samples), Stats: bench.Summarize(samples), TSCPerNs: tscPerNs,
		Parent: side, Child: child, Samples: samples}, nil
}

func readReport(r *bufio.Reader) (childReport, error) {
	var rep childReport
	line, err := r.ReadBytes('\n')
	if err != nil {
		return rep, err
	}
	if err := json.Unmarshal(line, &rep); err != nil {
		return rep, fmt.Errorf("decode echo report: %w", err)
	}
	if rep.Error != "" {
		return rep, errors.New(rep.Error)
	}
	return rep, nil
}

// cResult is pingpong.c's JSON line.
type cResult struct {
	PinError       int     `json:"pin_error"`
	SchedFIFO      string  `json:"sched_fifo"`
	ParentCPUStart int     `json:"parent_cpu_start"`
	ParentCPUEnd   int     `json:"parent_cpu_end"`
	ChildCPU       int     `json:"child_cpu"`
	ParentVolCS    int64   `json:"parent_vol_cs"`
	ParentInvolCS  int64   `json:"parent_invol_cs"`
	ChildVolCS     int64   `json:"child_vol_cs"`
	ChildInvolCS   int64   `json:"child_invol_cs"`
	MedianNs       float64 `json:"median_ns"`
}

func measureC(ctx context.Context, o *Options, bin, mech string, size int, pl placement) Row {
	row := Row{Mechanism: "c:" + mech, Impl: "c", Size: size, Placement: pl.name, CPUs: pl.cpus(mech), PinMode: pl.pinMode("c")}
	dir, err := os.MkdirTemp("", "ipcbench-c")
	if err != nil {
		row.Error = err.Error()
		return row
	}
	defer os.RemoveAll(dir)
	raw := filepath.Join(dir, "samples.bin")
	fifoPriority := 0 // pingpong.c: 0 is SCHED_OTHER
	if o.Sched == SchedFIFO {
		fifoPriority = FIFOPriority
	}
	pin := pl.name
	if pl.name == PlaceUnpinned {
		pin = "none"
	}
	cmd := exec.CommandContext(ctx, bin, mech, itoa(size), itoa(o.Iterations), itoa(o.Warmup), pin,
		itoa(pl.parent), itoa(pl.child), itoa(fifoPriority), raw)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		row.Error = fmt.Sprintf("%v: %s", err, bytes.TrimSpace(stderr.Bytes()))
		return row
	}
	var cr cResult
	if err := json.Unmarshal(out, &cr); err != nil {
		row.Error = fmt.Sprintf("decode %q: %v", out, err)
		return row
	}
	b, err := os.ReadFile(raw)
	if err != nil || len(b) != 8*o.Iterations {
		row.Error = fmt.Sprintf("raw samples: %d bytes, %v", len(b), err)
		return row
	}
	row.Samples = make([]float64, o.Iterations)
	for i := range row.Samples {
		row.Samples[i] = float64(int64(binary.NativeEndian.Uint64(b[8*i:])))
	}
	row.Iterations = o.Iterations
	row.Stats = bench.Summarize(row.Samples)
	fifoState := func(s string) string {
		if s == "ok" || s == "off" {
			return s
		}
		return "refused: " + s
	}
	row.Parent = Side{CPUStart: cr.ParentCPUStart, CPUEnd: cr.ParentCPUEnd, SchedFIFO: fifoState(cr.SchedFIFO),
		VolCS: cr.ParentVolCS, InvolCS: cr.ParentInvolCS}
	row.Child = &Side{CPUStart: cr.ChildCPU, CPUEnd: cr.ChildCPU, SchedFIFO: fifoState(cr.SchedFIFO),
		VolCS: cr.ChildVolCS, InvolCS: cr.ChildInvolCS}
	row.Sched = rowSched(o, row.Parent, row.Child)
	return row
}
