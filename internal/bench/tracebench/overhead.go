package tracebench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/ipclab/logagg/internal/bench"
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

// OverheadSpec is one overhead study: the same fixed-rate raw latency row
// (package latency) measured with each tracer.
type OverheadSpec struct {
	Transport string        // default tcp (seed 002 measured TCP)
	Size      int           // default 4096
	Rate      int           // default 20000
	Duration  time.Duration // measured time per tracer; default 5s (quick 1s)
	Warmup    time.Duration // default 1s (quick 200ms)
	Quick     bool
	// Tracers to run, in order; default none, idle, log.
	Tracers []string
	// Exe and EchoArgs start latency's echo side (see latency.Options).
	Exe      string
	EchoArgs []string
	// LogFile is where the logging tracer's lines go; default a file in a
	// temporary directory, removed at the end.
	LogFile string
	Trace   trace.Options
}

// OverheadRow is one tracer's run.
type OverheadRow struct {
	Tracer      string      `json:"tracer"`
	Description string      `json:"description"`
	Latency     latency.Row `json:"latency"`
	// Events is the number of lines the logging tracer printed (and
	// LogBytes what they took in the file); 0 for the others.
	Events   int64   `json:"events_logged"`
	LogBytes int64   `json:"log_bytes"`
	LogFile  string  `json:"log_file,omitempty"`
	AttachMs float64 `json:"attach_ms"`
}

var tracerDescriptions = map[string]string{
	TracerNone: "no tracer",
	TracerIdle: "tracer attached, nothing logged",
	TracerLog:  "tracer logging every event to a file",
}

func (o *OverheadSpec) fill() error {
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
	if len(o.Tracers) == 0 {
		o.Tracers = []string{TracerNone, TracerIdle, TracerLog}
	}
	for _, t := range o.Tracers {
		if _, ok := tracerDescriptions[t]; !ok {
			return fmt.Errorf("%w: tracer %q (want none, idle, log)", ErrBadSpec, t)
		}
	}
	return nil
}

// Overhead measures the latency row once per tracer. A row whose latency
// run failed carries the error in Latency.Error; Overhead itself fails on
// bad options, missing privileges, a tracer that does not start, or ctx.
func Overhead(ctx context.Context, o OverheadSpec) ([]OverheadRow, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	if err := preflight(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "lgov")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var rows []OverheadRow
	for _, tr := range o.Tracers {
		row, err := overheadOne(ctx, &o, tr, dir)
		if err != nil {
			return rows, fmt.Errorf("tracer %s: %w", tr, err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func overheadOne(ctx context.Context, o *OverheadSpec, tracer, dir string) (OverheadRow, error) {
	row := OverheadRow{Tracer: tracer, Description: tracerDescriptions[tracer]}
	var sess *pinned
	var logf *os.File
	var logw *bufio.Writer
	if tracer != TracerNone {
		src := idleScript
		if tracer == TracerLog {
			src = logScript
			path := o.LogFile
			if path == "" {
				path = filepath.Join(dir, "overhead_log.txt")
			}
			f, err := os.Create(path)
			if err != nil {
				return row, err
			}
			logf, logw = f, bufio.NewWriterSize(f, 1<<20)
			row.LogFile = path
			if o.LogFile == "" {
				row.LogFile = "" // removed at the end: do not point at it
			}
		}
		script := filepath.Join(dir, "overhead_"+tracer+".bt")
		if err := os.WriteFile(script, []byte(src), 0o600); err != nil {
			return row, err
		}
		opts := o.Trace
		if logw != nil {
			opts.OnPrintf = func(l string) { _, _ = logw.WriteString(l) }
		}
		var err error
		sess, err = startPinned(ctx, script, trace.Target{PID: os.Getpid()}, opts)
		if err != nil {
			if logf != nil {
				logf.Close()
			}
			return row, err
		}
		row.AttachMs = float64(sess.AttachTime.Microseconds()) / 1e3
	}
	rep, lerr := runLatencyPinned(ctx, latency.Options{
		Modes: []string{latency.ModeRaw}, Transports: []string{o.Transport},
		Size: o.Size, Rate: o.Rate, Duration: o.Duration, Warmup: o.Warmup, Quick: o.Quick,
		Exe: o.Exe, EchoArgs: o.EchoArgs,
	})
	var serr error
	if sess != nil {
		out, err := sess.Stop()
		sess.done()
		serr = err
		if out != nil {
			row.Events = int64(len(out.Printf))
		}
	}
	if logf != nil {
		if err := logw.Flush(); err != nil && serr == nil {
			serr = err
		}
		if fi, err := logf.Stat(); err == nil {
			row.LogBytes = fi.Size()
		}
		if err := logf.Close(); err != nil && serr == nil {
			serr = err
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
	row.Latency.Mode = "tracer=" + tracer
	return row, nil
}

// WriteOverhead prints seed 002's table for each tracer, then the tracers
// side by side with each one's difference from the first (no tracer), in
// microseconds: one way and round trip.
func WriteOverhead(w io.Writer, rows []OverheadRow) error {
	lrows := make([]latency.Row, 0, len(rows))
	for _, r := range rows {
		lrows = append(lrows, r.Latency)
	}
	if err := latency.WriteSeedTable(w, lrows); err != nil {
		return err
	}
	if len(rows) == 0 {
		return nil
	}
	var b strings.Builder
	base := rows[0].Latency
	fmt.Fprintf(&b, "Side by side: %s, %s at %d/s; µs, (difference from %s)\n", base.Transport, bench.FormatSize(base.Size), base.Rate, rows[0].Description)
	hdr := []string{"latency (microseconds)"}
	for _, r := range rows {
		hdr = append(hdr, r.Tracer+": one way", r.Tracer+": round trip")
	}
	t := &bench.Table{Header: hdr}
	for _, line := range seedLines {
		cells := []any{line.name}
		for i, r := range rows {
			for j, d := range []*latency.Dist{&r.Latency.OneWay, r.Latency.RoundTrip} {
				if d == nil || r.Latency.Error != "" {
					cells = append(cells, "-")
					continue
				}
				v := line.f(d) / 1e3
				bd := []*latency.Dist{&base.OneWay, base.RoundTrip}[j]
				if i == 0 || bd == nil || base.Error != "" {
					cells = append(cells, fmt.Sprintf("%.0f", v))
					continue
				}
				cells = append(cells, fmt.Sprintf("%.0f (%+.0f)", v, v-line.f(bd)/1e3))
			}
		}
		t.Add(cells...)
	}
	n := []any{"measurements"}
	for _, r := range rows {
		n = append(n, r.Latency.Measured, r.Latency.Measured)
	}
	t.Add(n...)
	ev := []any{"events logged"}
	for _, r := range rows {
		ev = append(ev, r.Events, "")
	}
	t.Add(ev...)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	_, err := t.WriteTo(w)
	return err
}

var seedLines = []struct {
	name string
	f    func(d *latency.Dist) float64
}{
	{"mean", func(d *latency.Dist) float64 { return d.Mean }},
	{"99th percentile", func(d *latency.Dist) float64 { return d.P99 }},
	{"99.9th percentile", func(d *latency.Dist) float64 { return d.P999 }},
	{"99.99th percentile", func(d *latency.Dist) float64 { return d.P9999 }},
	{"99.999th percentile", func(d *latency.Dist) float64 { return d.P99999 }},
	{"worst", func(d *latency.Dist) float64 { return d.Max }},
}

// OverheadTable is the compact summary (one line per tracer) for
// `ipcbench` --json output's companion table.
func OverheadTable(rows []OverheadRow) *bench.Table {
	t := &bench.Table{Header: []string{"tracer", "transport", "n", "1w mean", "1w p99", "1w p99.99", "1w max", "rt mean", "rt p99", "rt p99.99", "rt max", "events", "log MiB"}}
	for _, r := range rows {
		l := r.Latency
		rt := []any{"-", "-", "-", "-"}
		if l.RoundTrip != nil {
			rt = []any{bench.FormatNs(l.RoundTrip.Mean), bench.FormatNs(l.RoundTrip.P99), bench.FormatNs(l.RoundTrip.P9999), bench.FormatNs(l.RoundTrip.Max)}
		}
		cells := []any{r.Tracer, l.Transport, l.Measured, bench.FormatNs(l.OneWay.Mean), bench.FormatNs(l.OneWay.P99), bench.FormatNs(l.OneWay.P9999), bench.FormatNs(l.OneWay.Max)}
		cells = append(cells, rt...)
		cells = append(cells, r.Events, strconv.FormatFloat(float64(r.LogBytes)/(1<<20), 'f', 1, 64))
		t.Add(cells...)
	}
	return t
}

// runLatencyPinned runs latency.Run on a locked OS thread that outlives
// it. latency starts its echo child with Pdeathsig from the calling thread
// and its paced sender exits locked to a thread (which Go then destroys);
// when those are the same thread the echo is SIGKILLed just before the
// last echoes arrive ("connection reset by peer"). Seen here about one run
// in ten. Running Run on a thread no other goroutine can take avoids it.
func runLatencyPinned(ctx context.Context, o latency.Options) (*latency.Report, error) {
	type result struct {
		rep *latency.Report
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
