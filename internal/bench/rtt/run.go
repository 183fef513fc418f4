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
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ipclab/logagg/cref"
	"github.com/ipclab/logagg/internal/bench"
	"golang.org/x/sys/unix"
)

// Pin modes.
const (
	PinSame  = "same"  // both sides on the first allowed CPU
	PinCross = "cross" // measuring side on the first allowed CPU, echo side on the second
	PinNone  = "none"  // the scheduler decides; where each side ran is still recorded
)

// ErrBadOptions is returned (wrapped) for invalid Options.
var ErrBadOptions = errors.New("bad rtt options")

// Options configure Run. Zero values take the documented defaults.
type Options struct {
	Mechanisms []string // default AllMechanisms
	Sizes      []int    // payload bytes; default {100}
	Iterations int      // timed round trips per row; default 100000
	Warmup     int      // untimed round trips first; default Iterations/10 (max 10000)
	Pin        string   // PinSame, PinCross or PinNone (default)
	SchedFIFO  bool     // try SCHED_FIFO on both sides; a refusal is noted, not fatal
	// GoSyscalls makes both Go sides use unix.Read/unix.Write-style
	// runtime-aware syscalls instead of raw ones, to show what the
	// runtime's syscall bookkeeping costs (see sysRead).
	GoSyscalls bool
	// CRef adds the C reference rows "c:pipe" and "c:unixsock" (built with
	// gcc, see package cref) for every size where "pipe"/"unixsock" run.
	CRef bool
	// Exe and EchoArgs start the echo side: Exe EchoArgs... --mech ...
	// Defaults: /proc/self/exe and {EchoSubcommand}.
	Exe      string
	EchoArgs []string
	// Samples, if set, receives every sample as CSV
	// "mechanism,size,iteration,ns" with a header line.
	Samples  io.Writer
	Progress *bench.Progress
}

// Params is the Options subset recorded in the Result.
type Params struct {
	Mechanisms []string `json:"mechanisms"`
	Sizes      []int    `json:"sizes"`
	Iterations int      `json:"iterations"`
	Warmup     int      `json:"warmup"`
	Pin        string   `json:"pin"`
	SchedFIFO  bool     `json:"sched_fifo"`
	GoSyscalls bool     `json:"go_syscalls"`
	CRef       bool     `json:"c_reference"`
	CPUs       []int    `json:"cpus"` // the two CPUs pinning uses (first, second allowed)
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

// Row is one mechanism at one size.
type Row struct {
	Mechanism  string        `json:"mechanism"`
	Impl       string        `json:"impl"` // "go" or "c"
	Size       int           `json:"size"`
	Iterations int           `json:"iterations"`
	Stats      bench.Summary `json:"stats_ns"`
	Parent     Side          `json:"parent"`
	Child      *Side         `json:"child,omitempty"`
	// RatioToC is this Go row's median over the C reference row's median
	// for the same mechanism and size, measured in the same run.
	RatioToC float64 `json:"ratio_to_c,omitempty"`
	// Error is set when the row could not be measured (e.g. a size above a
	// kernel limit); the other fields are then empty.
	Error   string    `json:"error,omitempty"`
	Samples []float64 `json:"-"`
}

// Report is what Run returns.
type Report struct {
	Params Params
	Rows   []Row
	Notes  []string
}

func (o *Options) fill() error {
	if len(o.Mechanisms) == 0 {
		o.Mechanisms = AllMechanisms
	}
	for _, m := range o.Mechanisms {
		if !knownMech(m) {
			return fmt.Errorf("%w: %w: %q (known: %v)", ErrBadOptions, ErrUnknownMechanism, m, AllMechanisms)
		}
	}
	if len(o.Sizes) == 0 {
		o.Sizes = []int{100}
	}
	for _, s := range o.Sizes {
		if s < 1 {
			return fmt.Errorf("%w: size %d < 1", ErrBadOptions, s)
		}
	}
	if o.Iterations == 0 {
		o.Iterations = 100000
	}
	if o.Iterations < 1 || o.Warmup < 0 {
		return fmt.Errorf("%w: iterations %d, warmup %d", ErrBadOptions, o.Iterations, o.Warmup)
	}
	if o.Warmup == 0 {
		o.Warmup = min(o.Iterations/10, 10000)
	}
	switch o.Pin {
	case "":
		o.Pin = PinNone
	case PinSame, PinCross, PinNone:
	default:
		return fmt.Errorf("%w: pin %q (want same, cross or none)", ErrBadOptions, o.Pin)
	}
	if o.Exe == "" {
		o.Exe = "/proc/self/exe"
	}
	if o.EchoArgs == nil {
		o.EchoArgs = []string{EchoSubcommand}
	}
	return nil
}

func knownMech(m string) bool {
	for _, k := range AllMechanisms {
		if k == m {
			return true
		}
	}
	return false
}

// epoch anchors mono: time.Since on a Time with a monotonic reading costs
// one clock read (time.Now costs two: wall and monotonic).
var epoch = time.Now()

func mono() int64 { return int64(time.Since(epoch)) }

// Run measures every mechanism at every size. Rows that cannot run (a limit,
// a missing compiler) carry Error and a Note; Run itself fails only on bad
// options, a cancelled ctx or a broken Samples writer.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	cpus, err := allowedCPUs()
	if err != nil {
		return nil, err
	}
	cpuA, cpuB := cpus[0], cpus[0]
	if len(cpus) > 1 {
		cpuB = cpus[1]
	}
	rep := &Report{Params: Params{Mechanisms: o.Mechanisms, Sizes: o.Sizes, Iterations: o.Iterations,
		Warmup: o.Warmup, Pin: o.Pin, SchedFIFO: o.SchedFIFO, GoSyscalls: o.GoSyscalls, CRef: o.CRef, CPUs: []int{cpuA, cpuB}}}
	if o.Pin == PinCross && cpuA == cpuB {
		return nil, fmt.Errorf("%w: pin cross needs two CPUs, allowed %v", ErrBadOptions, cpus)
	}
	note := func(f string, a ...any) { rep.Notes = append(rep.Notes, fmt.Sprintf(f, a...)) }
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
	for _, size := range o.Sizes {
		for _, mech := range o.Mechanisms {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			o.Progress.SetLabel(mech + " " + bench.FormatSize(size))
			pa, ca := cpuA, cpuB
			switch {
			case mech == MechShm1Core:
				ca = cpuA // the mechanism is defined as one CPU, whatever --pin says
			case o.Pin == PinSame:
				ca = cpuA
			case o.Pin == PinNone:
				pa, ca = -1, -1
			}
			row := measureGo(ctx, &o, mech, size, pa, ca)
			if row.Error != "" {
				note("%s %d B not measured: %s", mech, size, row.Error)
			}
			for _, s := range []*Side{&row.Parent, row.Child} {
				if s != nil && len(s.SchedFIFO) > 7 && s.SchedFIFO[:7] == "refused" && !fifoNoted[s.SchedFIFO] {
					fifoNoted[s.SchedFIFO] = true
					note("SCHED_FIFO %s; continued under SCHED_OTHER", s.SchedFIFO)
				}
			}
			rep.Rows = append(rep.Rows, row)
			if err := writeSamples(csv, &row); err != nil {
				return rep, err
			}
			if cbin != "" && (mech == MechPipe || mech == MechUnixSock) && row.Error == "" {
				crow := measureC(ctx, &o, cbin, mech, size, cpuA, cpuB)
				if crow.Error != "" {
					note("c:%s %d B failed: %s", mech, size, crow.Error)
				} else if crow.Stats.Median > 0 {
					rep.Rows[len(rep.Rows)-1].RatioToC = row.Stats.Median / crow.Stats.Median
				}
				rep.Rows = append(rep.Rows, crow)
				if err := writeSamples(csv, &crow); err != nil {
					return rep, err
				}
			}
		}
	}
	if csv != nil {
		if err := csv.Flush(); err != nil {
			return rep, fmt.Errorf("write samples: %w", err)
		}
	}
	return rep, nil
}

func writeSamples(w *bufio.Writer, r *Row) error {
	if w == nil {
		return nil
	}
	var b []byte
	for i, v := range r.Samples {
		b = append(b[:0], r.Mechanism...)
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

// measureGo runs one Go row on a fresh locked thread that dies with the row.
func measureGo(ctx context.Context, o *Options, mech string, size, parentCPU, childCPU int) Row {
	out := make(chan Row, 1)
	go func() {
		// Never unlocked on purpose: when this goroutine returns, the
		// runtime discards the thread with its affinity and SCHED_FIFO.
		runtime.LockOSThread()
		var row Row
		var err error
		if mech == MechPipeInproc {
			row, err = measureInproc(o, size, parentCPU)
		} else {
			row, err = measureChild(ctx, o, mech, size, parentCPU, childCPU)
		}
		row.Mechanism, row.Impl, row.Size = mech, "go", size
		if err != nil {
			row = Row{Mechanism: mech, Impl: "go", Size: size, Error: err.Error()}
		}
		out <- row
	}()
	return <-out
}

// prepareSelf pins and schedules the calling (locked) thread.
func prepareSelf(o *Options, cpu int) (Side, error) {
	s := Side{PID: os.Getpid(), SchedFIFO: "off"}
	if err := pinThread(cpu); err != nil {
		return s, err
	}
	if o.SchedFIFO {
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
	c := &streamConn{r: p[0], w: p[1], raw: !o.GoSyscalls}
	buf := make([]byte, size)
	samples, err := pingLoop(o, c, buf, &side)
	if err != nil {
		return Row{}, err
	}
	return Row{Iterations: len(samples), Stats: bench.Summarize(samples), Parent: side, Samples: samples}, nil
}

// pingLoop runs the warmup and timed round trips on c and fills in the
// measuring side's CPU and context-switch figures.
func pingLoop(o *Options, c conn, buf []byte, side *Side) ([]float64, error) {
	for i := 0; i < o.Warmup; i++ {
		if err := c.send(buf); err != nil {
			return nil, fmt.Errorf("warmup %d: %w", i, err)
		}
		if err := c.recv(buf); err != nil {
			return nil, fmt.Errorf("warmup %d: %w", i, err)
		}
	}
	samples := make([]float64, o.Iterations)
	side.CPUStart = getcpu()
	v0, i0 := threadCS()
	for i := range samples {
		t0 := mono()
		if err := c.send(buf); err != nil {
			return nil, fmt.Errorf("round trip %d: %w", i, err)
		}
		if err := c.recv(buf); err != nil {
			return nil, fmt.Errorf("round trip %d: %w", i, err)
		}
		samples[i] = float64(mono() - t0)
		if i&4095 == 4095 {
			o.Progress.Add(4096)
		}
	}
	v1, i1 := threadCS()
	side.CPUEnd = getcpu()
	side.VolCS, side.InvolCS = v1-v0, i1-i0
	return samples, nil
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
	if o.SchedFIFO {
		args = append(args, "--sched-fifo")
	}
	if o.GoSyscalls {
		args = append(args, "--go-syscalls")
	}
	args = append(args, ch.childArgs...)
	cmd := exec.CommandContext(ctx, o.Exe, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.ExtraFiles = append([]*os.File{ctlW}, ch.childFiles...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Started before this thread is pinned: a child inherits the forking
	// thread's affinity and policy and must choose its own.
	err = cmd.Start()
	ctlW.Close()
	for _, f := range ch.childFiles {
		f.Close() // our copies would hide the peer's death (no EOF)
	}
	if err != nil {
		return Row{}, fmt.Errorf("start echo side: %w", err)
	}
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		abort.Store(true)
		ch.unblock()
		exited <- err
	}()
	fail := func(err error) (Row, error) {
		cmd.Process.Kill()
		werr := <-exited
		if msg := bytes.TrimSpace(stderr.Bytes()); len(msg) > 0 {
			return Row{}, fmt.Errorf("%w (echo side: %w: %s)", err, werr, msg)
		}
		return Row{}, err
	}
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
	buf := make([]byte, size)
	samples, err := pingLoop(o, ch.parent, buf, &side)
	if err != nil {
		// Kill first: a healthy child blocked in recv would never write
		// again, and a failed one has already written its reason.
		cmd.Process.Kill()
		if _, rerr := readReport(ctl); rerr != nil && !errors.Is(rerr, io.EOF) {
			err = fmt.Errorf("%w; echo side: %w", err, rerr)
		}
		return fail(err)
	}
	done, err := readReport(ctl)
	if err != nil {
		return fail(fmt.Errorf("echo side report: %w", err))
	}
	if werr := <-exited; werr != nil {
		return Row{}, fmt.Errorf("echo side: %w: %s", werr, bytes.TrimSpace(stderr.Bytes()))
	}
	child := &Side{PID: ready.PID, Affinity: ready.Affinity, CPUStart: ready.CPU, CPUEnd: done.CPU,
		SchedFIFO: ready.SchedFIFO, VolCS: done.VolCS, InvolCS: done.InvolCS}
	return Row{Iterations: len(samples), Stats: bench.Summarize(samples), Parent: side, Child: child, Samples: samples}, nil
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

func measureC(ctx context.Context, o *Options, bin, mech string, size, cpuA, cpuB int) Row {
	row := Row{Mechanism: "c:" + mech, Impl: "c", Size: size}
	dir, err := os.MkdirTemp("", "ipcbench-c")
	if err != nil {
		row.Error = err.Error()
		return row
	}
	defer os.RemoveAll(dir)
	raw := filepath.Join(dir, "samples.bin")
	fifo := "0"
	if o.SchedFIFO {
		fifo = "1"
	}
	cmd := exec.CommandContext(ctx, bin, mech, itoa(size), itoa(o.Iterations), itoa(o.Warmup), o.Pin,
		itoa(cpuA), itoa(cpuB), fifo, raw)
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
	return row
}
