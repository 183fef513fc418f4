package tracebench

import (
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

	"github.com/ipclab/logagg/internal/bench/latency"
	"github.com/ipclab/logagg/internal/trace"
)

// Tracers of the overhead study (seed 002's A, B and C).
const (
	TracerNone = "none" // A: no bpftrace running
	TracerIdle = "idle" // B: probes attached and firing, nothing logged
	TracerLog  = "log"  // C: every event printed and written to a file
)

// The tracer scripts. Both attach the same two tracepoints, which fire on
// every read(2) and write(2) of every process on the machine, as seed
// 002's tcpwindow.bt fired on every TCP packet. The logging one prints a
// line for each read/write of the latency workload's echo process (the
// child of $1 that is not bpftrace: bpftrace's own writes of those lines
// would feed back into it, and so would ipcbench's writes of them to the
// log file, which is why the sender side in ipcbench is not logged). The
// idle one adds a filter no syscall can pass (a return value below
// -4095, outside the errno range), so it pays for every probe hit and
// logs nothing — seed 002's B, where no zero-window event happened.
const (
	logScript = `// overhead_log - print every read/write of the latency echo process (child of $1)
tracepoint:syscalls:sys_exit_read,
tracepoint:syscalls:sys_exit_write
/curtask->real_parent->tgid == $1 && comm != "bpftrace"/
{
	printf("%llu|pid=%d tid=%d|%s|%s ret=%d\n", nsecs, pid, tid, comm, probe, args->ret);
}
`
	idleScript = `// overhead_idle - the same probes as overhead_log, with a filter nothing passes
tracepoint:syscalls:sys_exit_read,
tracepoint:syscalls:sys_exit_write
/args->ret < -4095 && curtask->real_parent->tgid == $1 && comm != "bpftrace"/
{
	printf("%llu|pid=%d tid=%d|%s|%s ret=%d\n", nsecs, pid, tid, comm, probe, args->ret);
}
`
)

// Placements of the tracer (bpftrace's user-space process) relative to
// the workload, whose threads are pinned to CPU 0 for the whole study. The probes
// themselves run in the traced syscalls, on the workload's CPU, wherever
// bpftrace is; what moves is bpftrace reading its ring buffer and
// formatting and writing the lines.
const (
	PlacementShared = "shared" // bpftrace on CPU 0, with the workload
	PlacementOther  = "other"  // bpftrace on CPU 1
)

// OverheadKind is the kind of `ipcbench trace --overhead` results.
const OverheadKind = "trace-overhead"

// OverheadOptions is one overhead study: the same fixed-rate raw latency row
// (package latency) measured Runs times with each tracer state, the states
// interleaved.
type OverheadOptions struct {
	Transport string        // default tcp (seed 002 measured TCP)
	Size      int           // default 4096
	Rate      int           // default 20000
	Duration  time.Duration // measured time per run; default 5s (quick 1s)
	Warmup    time.Duration // default 1s (quick 200ms)
	Quick     bool
	// Tracers to run, in order; default none, idle, log.
	Tracers []string
	// Placements of bpftrace for the idle and logging tracers; default
	// shared, other. The workload is pinned to CPU 0 in every run (none
	// included), so that the states differ only by the tracer.
	Placements []string
	// Runs is how many times every state is measured; default 3 (quick
	// 2). Run r measures every state in turn, in reverse order on odd
	// runs, so that a drift of the machine affects every state alike.
	Runs int
	// Exe and EchoArgs start latency's echo side (see latency.Options).
	Exe      string
	EchoArgs []string
	// LogFile is where the logging tracer's output goes (bpftrace -f json,
	// each run overwriting it); default a file in a temporary directory,
	// removed at the end.
	LogFile string
	Trace   trace.Options
}

// OverheadRow is one run of one tracer state.
type OverheadRow struct {
	Tracer      string      `json:"tracer"`
	Placement   string      `json:"placement,omitempty"` // "" for no tracer
	Run         int         `json:"run"`                 // 1-based
	Description string      `json:"description"`
	Latency     latency.Row `json:"latency"`
	// Events is the number of lines the logging tracer printed (and
	// LogBytes what they took in the file), EventsPerS per second of the
	// latency run; 0 for the others.
	Events     int64   `json:"events_logged"`
	EventsPerS float64 `json:"events_per_s"`
	LogBytes   int64   `json:"log_bytes"`
	LogFile    string  `json:"log_file,omitempty"`
	AttachMs   float64 `json:"attach_ms"`
	// TracerCPU is bpftrace's CPU time (user + system, from /proc, 10 ms
	// ticks) over the latency run's wall time: 1 is one whole CPU.
	TracerCPU float64 `json:"tracer_cpu"`
	// WorkloadCPUNs is the CPU time of this process and the echo child
	// during the latency run (getrusage) per measured message: it holds
	// the probes' own cost, which runs in the traced syscalls.
	WorkloadCPUNs float64 `json:"workload_cpu_ns_per_msg"`
}

// State names the tracer state of r: "none", "idle/shared", "log/other".
func (r *OverheadRow) State() string {
	if r.Placement == "" {
		return r.Tracer
	}
	return r.Tracer + "/" + r.Placement
}

var tracerDescriptions = map[string]string{
	TracerNone: "no tracer",
	TracerIdle: "tracer attached, nothing logged",
	TracerLog:  "tracer logging every event to a file",
}

func (o *OverheadOptions) fill() error {
	if o.Transport == "" {
		o.Transport = "tcp"
	}
	if o.Size == 0 {
		o.Size = 4096
	}
	if o.Rate == 0 {
		o.Rate = 20000
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
		if o.Quick {
			o.Duration = time.Second
		}
	}
	if o.Warmup == 0 {
		o.Warmup = time.Second
		if o.Quick {
			o.Warmup = 200 * time.Millisecond
		}
	}
	if o.Runs == 0 {
		o.Runs = 3
		if o.Quick {
			o.Runs = 2
		}
	}
	if o.Runs < 1 {
		return fmt.Errorf("%w: runs %d", ErrBadSpec, o.Runs)
	}
	if len(o.Tracers) == 0 {
		o.Tracers = []string{TracerNone, TracerIdle, TracerLog}
	}
	for _, t := range o.Tracers {
		if _, ok := tracerDescriptions[t]; !ok {
			return fmt.Errorf("%w: tracer %q (want none, idle, log)", ErrBadSpec, t)
		}
	}
	if len(o.Placements) == 0 {
		o.Placements = []string{PlacementShared, PlacementOther}
	}
	for _, p := range o.Placements {
		if p != PlacementShared && p != PlacementOther {
			return fmt.Errorf("%w: placement %q (want shared, other)", ErrBadSpec, p)
		}
	}
	return nil
}

// overheadState is one tracer state of the study.
type overheadState struct{ tracer, placement string }

func (o *OverheadOptions) states() []overheadState {
	var st []overheadState
	for _, t := range o.Tracers {
		if t == TracerNone {
			st = append(st, overheadState{t, ""})
			continue
		}
		for _, p := range o.Placements {
			st = append(st, overheadState{t, p})
		}
	}
	return st
}

// OverheadResult is the overhead study: one row per run of each tracer
// state, and how the study was run.
type OverheadResult struct {
	Params Params
	Rows   []OverheadRow
	Notes  []string
}

// overheadParams are the Params of a study of asked (the options as given,
// before their defaults were filled in) that measured rows. Transport,
// size and rate are the rows' own; duration and warm-up are saved when
// they were asked for (OverheadOptions documents the defaults).
func overheadParams(asked *OverheadOptions, filled *OverheadOptions, rows []OverheadRow) Params {
	p := Params{Mode: ModeOverhead, Transports: []string{filled.Transport}, Sizes: []int{filled.Size}, Rate: filled.Rate,
		Placements: asked.Placements}
	if len(rows) > 0 {
		l := rows[0].Latency
		p.Transports, p.Rate, p.Sizes = []string{l.Transport}, l.Rate, []int{l.Size}
	}
	if asked.Duration > 0 {
		p.Duration = asked.Duration.String()
	}
	if asked.Warmup > 0 {
		p.Warmup = asked.Warmup.String()
	}
	for _, row := range rows {
		p.Runs = max(p.Runs, row.Run)
	}
	return p
}

// RunOverhead measures the latency row Runs times per tracer state. A row
// whose latency run failed carries the error in Latency.Error and a note;
// RunOverhead itself fails on bad options, missing privileges, fewer than
// two CPUs, a tracer that does not start, or ctx.
func RunOverhead(ctx context.Context, o OverheadOptions) (*OverheadResult, error) {
	asked := o
	if err := o.fill(); err != nil {
		return nil, err
	}
	if err := preflight(); err != nil {
		return nil, err
	}
	if runtime.NumCPU() < 2 {
		return nil, fmt.Errorf("%w: the overhead study pins the workload to CPU 0 and a tracer to CPU 1; this machine has one CPU", ErrBadSpec)
	}
	dir, err := os.MkdirTemp("", "lgov")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// The workload's three threads (sender, receiver, echo) are pinned to
	// CPU 0 by latency's placement "same"; this process's other threads
	// (the Go runtime's) are not. Pinning the whole process there, as
	// this study did until 2026-11-27, put one-way p50 at 1.5-3.6 ms with
	// the raw rows' raw syscalls (a thread blocked in one keeps its P, and
	// the runtime's threads then queue behind the workload on CPU 0);
	// 10-75 µs with the threads alone pinned.
	states := o.states()
	var rows []OverheadRow
	for run := 1; run <= o.Runs; run++ {
		order := slices.Clone(states)
		if run%2 == 0 {
			slices.Reverse(order)
		}
		for _, st := range order {
			row, err := overheadOne(ctx, &o, st, run, dir)
			if err != nil {
				return nil, fmt.Errorf("tracer %s run %d: %w", row.State(), run, err)
			}
			rows = append(rows, row)
		}
	}
	res := &OverheadResult{Params: overheadParams(&asked, &o, rows), Rows: rows, Notes: overheadNotes(rows)}
	for _, r := range rows {
		for _, n := range r.Latency.Notes {
			res.Notes = append(res.Notes, fmt.Sprintf("%s run %d: %s", r.State(), r.Run, n))
		}
		if r.Latency.Error != "" {
			res.Notes = append(res.Notes, fmt.Sprintf("%s run %d: %s", r.State(), r.Run, r.Latency.Error))
		}
	}
	return res, nil
}

func overheadOne(ctx context.Context, o *OverheadOptions, st overheadState, run int, dir string) (OverheadRow, error) {
	tracer := st.tracer
	row := OverheadRow{Tracer: tracer, Placement: st.placement, Run: run, Description: tracerDescriptions[tracer]}
	var sess *pinned
	// bpftrace -o does not truncate: every session gets a file of its own.
	outFile := filepath.Join(dir, fmt.Sprintf("overhead_%s_%s_%d.json", tracer, st.placement, run))
	if tracer == TracerLog && o.LogFile != "" {
		outFile = o.LogFile
		row.LogFile = outFile
	}
	if tracer != TracerNone {
		if err := os.Remove(outFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return row, err
		}
		src := idleScript
		if tracer == TracerLog {
			src = logScript
		}
		script := filepath.Join(dir, "overhead_"+tracer+".bt")
		if err := os.WriteFile(script, []byte(src), 0o600); err != nil {
			return row, err
		}
		opts := o.Trace
		// bpftrace writes to the file itself: its lines never pass
		// through this process, which is the workload being measured.
		opts.OutputFile = outFile
		opts.OnPrintf = nil
		var err error
		sess, err = startPinned(ctx, script, trace.Target{PID: os.Getpid()}, opts)
		if err != nil {
			return row, err
		}
		var set unix.CPUSet
		set.Set(map[string]int{PlacementShared: 0, PlacementOther: 1}[st.placement])
		if err := setAffinity(sess.Pid(), &set); err != nil {
			sess.Stop()
			sess.done()
			return row, err
		}
		row.AttachMs = float64(sess.AttachTime.Microseconds()) / 1e3
	}
	var tracerCPU0 time.Duration
	if sess != nil {
		tracerCPU0 = procCPU(sess.Pid())
	}
	var self0, child0 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &self0)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &child0)
	begin := time.Now()
	rep, lerr := runLatencyPinned(ctx, latency.Options{
		Modes: []string{latency.ModeRaw}, Transports: []string{o.Transport},
		Sizes: []int{o.Size}, Rate: o.Rate, Duration: o.Duration, Warmup: o.Warmup, Quick: o.Quick,
		Placements: []string{latency.PlaceSame}, CPUs: []int{0},
		// latency's default pacing: the sender spins to each due time,
		// yielding its CPU at every turn, so the echo, the receiver and a
		// shared tracer that wake on CPU 0 run at once.
		Exe: o.Exe, EchoArgs: o.EchoArgs,
	})
	wall := time.Since(begin)
	var self1, child1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &self1)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &child1)
	var serr error
	if sess != nil {
		row.TracerCPU = float64(procCPU(sess.Pid())-tracerCPU0) / float64(wall)
		out, err := sess.Stop()
		sess.done()
		serr = err
		if out != nil && tracer == TracerLog {
			row.Events = int64(len(out.Printf))
			row.EventsPerS = float64(row.Events) / wall.Seconds()
		}
		if fi, err := os.Stat(outFile); tracer == TracerLog && err == nil {
			row.LogBytes = fi.Size()
		}
		if outFile != o.LogFile {
			os.Remove(outFile)
		}
	}
	if lerr != nil {
		return row, lerr
	}
	if serr != nil {
		return row, serr
	}
	if len(rep.Rows) != 1 {
		return row, fmt.Errorf("latency returned %d rows, want 1", len(rep.Rows))
	}
	row.Latency = rep.Rows[0]
	row.Latency.Mode = "tracer=" + row.State()
	if n := row.Latency.Warmup + row.Latency.Sent; n > 0 {
		// The sender's spinning for its due times is the instrument's
		// waiting, not work: it would otherwise count as ~one CPU.
		cpu := rusageCPU(&self1) - rusageCPU(&self0) + rusageCPU(&child1) - rusageCPU(&child0) -
			time.Duration(row.Latency.PacingCPUNs)
		row.WorkloadCPUNs = float64(cpu) / float64(n)
	}
	return row, nil
}

func rusageCPU(r *unix.Rusage) time.Duration {
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

// procCPU is pid's user + system time from /proc/PID/stat (fields 14 and
// 15, in clock ticks of 10 ms: USER_HZ is 100 on Linux).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields after it follow
	// its closing parenthesis.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// setAffinity sets the CPU mask of every thread of pid. Threads started
// later inherit it from the thread that starts them.
func setAffinity(pid int, set *unix.CPUSet) error {
	for range 2 { // a second pass catches threads born during the first
		tids, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		if err != nil {
			return err
		}
		for _, t := range tids {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("set the CPU mask of thread %d of %d: %w", tid, pid, err)
			}
		}
	}
	return nil
}

// runLatencyPinned runs latency.Run on a locked OS thread that outlives
// it. latency starts its echo child with Pdeathsig from the calling thread
// and its paced sender exits locked to a thread (which Go then destroys);
// when those are the same thread the echo is SIGKILLed just before the
// last echoes arrive ("connection reset by peer"). Seen here about one run
// in ten. Running Run on a thread no other goroutine can take avoids it.
func runLatencyPinned(ctx context.Context, o latency.Options) (*latency.Result, error) {
	type result struct {
		rep *latency.Result
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		rep, err := latency.Run(ctx, o)
		ch <- result{rep, err}
	}()
	r := <-ch
	return r.rep, r.err
}
