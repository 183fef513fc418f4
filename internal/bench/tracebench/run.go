package tracebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ipclab/logagg/bpftrace"
	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/harness"
	"github.com/ipclab/logagg/internal/trace"
)

// Target says which process of the workload a script traces.
type Target string

const (
	TargetAggregator Target = "aggregator"
	TargetProducer   Target = "producer"
	// TargetAll traces every process (the script's $1 is 0), for scripts
	// whose events happen outside the workload's context (skb_drops).
	TargetAll Target = "all"
)

// ParseTarget accepts aggregator, producer and all.
func ParseTarget(s string) (Target, error) {
	switch t := Target(s); t {
	case TargetAggregator, TargetProducer, TargetAll:
		return t, nil
	}
	return "", fmt.Errorf("%w: target %q (want aggregator, producer or all)", ErrBadSpec, s)
}

// DefaultTarget is the side a shipped script is written for: the
// aggregator_* scripts and the receive/batch-write ones trace the
// aggregator, skb_drops every process (drops happen in softirq context),
// the rest the producer.
func DefaultTarget(script string) Target {
	switch s := strings.TrimSuffix(script, ".bt"); {
	case strings.HasPrefix(s, "aggregator_"), s == "recv_latency", s == "batch_write_fsync":
		return TargetAggregator
	case s == "skb_drops":
		return TargetAll
	}
	return TargetProducer
}

// Probe is one script attached to one side of the workload.
type Probe struct {
	Script string // shipped name (package bpftrace) or a .bt path
	Target Target
}

// CompareProbes counts syscalls on both sides: the probes of the
// syscalls-per-record comparison (see PerRecord).
var CompareProbes = []Probe{{"producer_syscalls", TargetProducer}, {"producer_syscalls", TargetAggregator}}

// ErrBadSpec is returned (wrapped) for invalid Options or OverheadOptions.
var ErrBadSpec = errors.New("bad trace spec")

// Kind is the subcommand of the scripted runs and the kind of their
// results (ADR 0037).
const Kind = "trace"

// Options is one `ipcbench trace` run: one aggregator listening on each
// transport in turn, at each size, with Producers producer processes each
// sending Count records at Rate/s, every probe attached.
type Options struct {
	AggregatorBin string
	ProducerBin   string
	Transports    []string // seed names: unixsock, tcp, unixgram, udp, fifo, shm, mq
	Sizes         []int    // record bytes; default 100
	Count         int      // records per producer; default 2000
	Rate          int      // records/s per producer; default 2000 (0 is refused: it would flood)
	Producers     int      // default 1
	// Probes default to CompareProbes (syscalls per record on both sides).
	Probes []Probe
	// Dir holds sockets and the output; default a new temporary directory
	// per run, removed at the end.
	Dir string
	// Trace is passed to trace.Start for every session (Bpftrace, Stderr...).
	Trace trace.Options
	// Stderr, if set, receives the aggregator's log lines.
	Stderr io.Writer
	// Progress advances by one per (transport, size); nil draws nothing.
	Progress *bench.Progress
}

// Validate fills the defaults and says which field is wrong.
func (o *Options) Validate() error {
	if len(o.Sizes) == 0 {
		o.Sizes = []int{100}
	}
	if o.Count == 0 {
		o.Count = 2000
	}
	if o.Rate == 0 {
		o.Rate = 2000
	}
	if o.Producers == 0 {
		o.Producers = 1
	}
	if len(o.Probes) == 0 {
		o.Probes = CompareProbes
	}
	switch {
	case o.AggregatorBin == "" || o.ProducerBin == "":
		return fmt.Errorf("%w: the aggregator and producer binaries are needed", ErrBadSpec)
	case len(o.Transports) == 0:
		return fmt.Errorf("%w: no transport", ErrBadSpec)
	case o.Count < 1 || o.Rate < 1 || o.Producers < 1:
		return fmt.Errorf("%w: count, rate and producers must be positive", ErrBadSpec)
	}
	for _, size := range o.Sizes {
		if size < 1 {
			return fmt.Errorf("%w: size %d", ErrBadSpec, size)
		}
	}
	for _, p := range o.Probes {
		if _, err := ParseTarget(string(p.Target)); err != nil {
			return err
		}
	}
	return nil
}

// Modes of Params.Mode: what a trace result measured.
const (
	ModeCompare  = "compare"  // CompareProbes: syscalls per record on both sides
	ModeScript   = "script"   // other probes (--script)
	ModeOverhead = "overhead" // RunOverhead
)

// Params are saved with every trace and trace-overhead result: Run's and
// RunOverhead's options as they ran.
type Params struct {
	Mode       string   `json:"mode"` // ModeCompare, ModeScript or ModeOverhead
	Script     string   `json:"script,omitempty"`
	Target     string   `json:"target,omitempty"`
	Transports []string `json:"transports"`
	Sizes      []int    `json:"sizes"`
	Count      int      `json:"count,omitempty"`
	Rate       int      `json:"rate"`
	Producers  int      `json:"producers,omitempty"`
	Duration   string   `json:"duration,omitempty"`
	Runs       int      `json:"runs,omitempty"`
	Placements []string `json:"placements,omitempty"`
	Warmup     string   `json:"warmup,omitempty"`
}

// params are o's Params; o is validated (its defaults filled in).
func (o *Options) params() Params {
	p := Params{Mode: ModeCompare, Script: "producer_syscalls", Target: "producer+aggregator"}
	if !slices.Equal(o.Probes, CompareProbes) {
		scripts, targets := make([]string, len(o.Probes)), make([]string, len(o.Probes))
		for i, pr := range o.Probes {
			scripts[i], targets[i] = pr.Script, string(pr.Target)
		}
		p = Params{Mode: ModeScript, Script: strings.Join(scripts, ","), Target: strings.Join(targets, ",")}
	}
	p.Transports, p.Sizes, p.Count, p.Rate, p.Producers = o.Transports, o.Sizes, o.Count, o.Rate, o.Producers
	return p
}

// Result is what Run measured: one Row per probe, transport and size, and
// what the reader must know to trust them.
type Result struct {
	Params Params
	Rows   []Row
	Notes  []string
}

// Notes of every result with syscall counts or histograms.
const (
	perRecordNote = "per record = count / records sent; a producer is counted from its execve (Go runtime start-up included), the aggregator from when it is ready (start-up excluded); R = Go runtime, T = transport, O = other (trace.CategoryOf); read/write include the Go netpoller's eventfd wake-ups, which CategoryOf cannot tell apart"
	topBucketNote = "a histogram's [2G, ...) bucket holds every value from 2^31 (2.1 s in ns) up: bpftrace's hist() has no higher bucket (its text output calls it [2G, 4G)); on futex and epoll_pwait these are threads parked for seconds"
)

// Run traces every transport × size in turn (see the package doc for how
// each run attaches). A run that fails for a reason the next run would not
// share (a producer's datagram refused, ...) becomes a note; Run fails on
// ctx, bad options, missing privileges or bpftrace, a script that does not
// compile, or when no run succeeded.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	res := &Result{Params: o.params()}
	var failed []string
	for _, t := range o.Transports {
		for _, size := range o.Sizes {
			label := fmt.Sprintf("%s size=%d", t, size)
			o.Progress.SetLabel(label)
			r, err := runPinned(ctx, spec{Options: &o, transport: t, size: size})
			o.Progress.Add(1)
			if err != nil {
				if ctx.Err() != nil || r == nil && fatal(err) {
					return nil, err
				}
				failed = append(failed, fmt.Sprintf("%s: %v", label, err))
				if r == nil {
					continue
				}
			}
			if r.written < r.sent {
				res.Notes = append(res.Notes, fmt.Sprintf("%s: %d of %d records written when the trace stopped", label, r.written, r.sent))
			}
			res.Rows = append(res.Rows, r.rows...)
		}
	}
	res.Notes = append(res.Notes, failed...)
	if len(res.Rows) == 0 {
		return nil, fmt.Errorf("no run succeeded: %s", strings.Join(failed, "; "))
	}
	if slices.ContainsFunc(res.Rows, func(r Row) bool { return len(r.Syscalls) > 0 }) {
		res.Notes = append(res.Notes, perRecordNote)
	}
	if slices.ContainsFunc(res.Rows, Row.hasTopBucket) {
		res.Notes = append(res.Notes, topBucketNote)
	}
	return res, nil
}

// fatal is an error that every other run would repeat too.
func fatal(err error) bool {
	var pe *trace.ProbeError
	return errors.Is(err, trace.ErrNotRoot) || errors.Is(err, trace.ErrNoBpftrace) || errors.Is(err, trace.ErrNoTracefs) ||
		errors.Is(err, ErrBadSpec) || errors.As(err, &pe)
}

// spec is one traced run of Run: one transport at one size.
type spec struct {
	*Options
	transport string
	size      int
}

// runResult is one traced run.
type runResult struct {
	sent, failed, written int64
	rows                  []Row // one per probe, in order
}

// attachSettle is the pause between attachment and releasing the producers.
const attachSettle = 250 * time.Millisecond

// session is one bpftrace attached to one pid for one probe.
type session struct {
	probe int
	pid   int
	s     *pinned
}

// runPinned starts the aggregator, the gated producers and one bpftrace
// per (probe, traced process), releases the producers, waits until they
// have exited and the aggregator has written what it received, stops
// bpftrace and returns what each script printed.
func runPinned(ctx context.Context, s spec) (*runResult, error) {
	// The aggregator and the producers get Pdeathsig from the forking
	// thread: keep that thread alive and ours until they are gone (see
	// pinned).
	type result struct {
		res *runResult
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		res, err := run(ctx, s)
		ch <- result{res, err}
	}()
	r := <-ch
	return r.res, r.err
}

func run(ctx context.Context, s spec) (res *runResult, err error) {
	if err := preflight(); err != nil {
		return nil, err
	}
	dir := s.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "lgtr")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	agg, err := startAggregator(ctx, s.AggregatorBin, s.transport, dir, s.Stderr)
	if err != nil {
		return nil, err
	}
	aggStopped := false
	defer func() {
		if !aggStopped {
			agg.kill()
		}
	}()

	// Producers wait at a gate until every tracer is attached, so that
	// their first syscall (execve) is traced.
	var prods []*harness.ProducerProc
	defer func() {
		for _, p := range prods {
			p.Kill() // no-op wait for producers that already exited
		}
	}()
	for i := 0; i < s.Producers; i++ {
		p, err := harness.Producer{Bin: s.ProducerBin, Transport: s.transport, URL: agg.url, Size: s.size,
			ID: fmt.Sprintf("%s-%d", s.transport, i), Rate: s.Rate, Count: s.Count, Gated: true}.Start(ctx)
		if err != nil {
			return nil, err
		}
		prods = append(prods, p)
	}

	// Attach every session; they compile in parallel.
	var want []session
	for i, p := range s.Probes {
		switch p.Target {
		case TargetAggregator:
			want = append(want, session{probe: i, pid: agg.pid()})
		case TargetProducer:
			for _, pr := range prods {
				want = append(want, session{probe: i, pid: pr.Pid()})
			}
		case TargetAll:
			want = append(want, session{probe: i, pid: 0})
		}
	}
	sessions, err := startSessions(ctx, s.Probes, want, s.Trace)
	defer func() {
		for _, ss := range sessions {
			_, _ = ss.s.Stop() // idempotent: the normal path stopped them already
			ss.s.done()
		}
	}()
	if err != nil {
		return nil, err
	}

	// trace.Start returns once bpftrace holds its perf_event fds, but
	// bpftrace 0.17 enables the programs on them a moment later, with
	// nothing to observe from outside; without this pause a producer's
	// first syscalls (its execve) were occasionally missed.
	select {
	case <-time.After(attachSettle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for _, p := range prods {
		if err := p.Release(); err != nil {
			return nil, fmt.Errorf("release producer: %w", err)
		}
	}
	res = &runResult{}
	var writes int64
	var prodErrs []error
	for _, p := range prods {
		sum, err := p.Wait()
		switch {
		case err != nil:
			prodErrs = append(prodErrs, err)
		case sum.Error != "":
			prodErrs = append(prodErrs, errors.New(sum.Error))
		}
		res.sent += sum.Sent
		res.failed += sum.Failed
		writes += sum.Writes
	}
	if res.sent == 0 {
		return nil, fmt.Errorf("%s: producers sent nothing: %w", s.transport, errors.Join(prodErrs...))
	}
	res.written = waitWritten(ctx, agg.output, res.sent, time.Second, 30*time.Second)
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	outs := make([][]*trace.Output, len(s.Probes))
	pids := make([][]int, len(s.Probes))
	attach := make([]time.Duration, len(s.Probes))
	var stopErrs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, ss := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := ss.s.Stop()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				stopErrs = append(stopErrs, fmt.Errorf("%s on pid %d: %w", s.Probes[ss.probe].Script, ss.pid, err))
			}
			if out != nil {
				outs[ss.probe] = append(outs[ss.probe], out)
				pids[ss.probe] = append(pids[ss.probe], ss.pid)
				attach[ss.probe] = max(attach[ss.probe], ss.s.AttachTime)
			}
		}()
	}
	wg.Wait()
	aggStopped = true
	if err := agg.stop(); err != nil {
		stopErrs = append(stopErrs, err)
	}
	if err := errors.Join(stopErrs...); err != nil {
		return nil, err
	}
	for i, p := range s.Probes {
		row := rowFrom(merge(outs[i]))
		row.Transport, row.Size, row.Script, row.Side = s.transport, s.size, scriptName(p.Script), p.Target
		row.Header = header(p.Script)
		row.PIDs = pids[i]
		sort.Ints(row.PIDs)
		row.Producers, row.Rate = s.Producers, s.Rate
		row.Records, row.Written, row.ProducerWrites = res.sent, res.written, writes
		row.AttachMs = float64(attach[i].Microseconds()) / 1e3
		res.rows = append(res.rows, row)
	}
	// Producer failures (a datagram refused, ...) do not void the trace;
	// the caller sees them next to the rows.
	return res, errors.Join(prodErrs...)
}

// preflight fails early, before any process starts, when tracing cannot work.
func preflight() error {
	if err := trace.CheckPrivileges(); err != nil {
		return err
	}
	return trace.EnsureTracefs()
}

// startSessions starts one bpftrace per wanted (probe, pid) concurrently and
// returns those that started; on error the caller stops the returned ones.
func startSessions(ctx context.Context, probes []Probe, want []session, opts trace.Options) ([]session, error) {
	var mu sync.Mutex
	var errs []error
	var started []session
	var wg sync.WaitGroup
	for _, w := range want {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts, err := startPinned(ctx, probes[w.probe].Script, trace.Target{PID: w.pid}, opts)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			w.s = ts
			started = append(started, w)
		}()
	}
	wg.Wait()
	return started, errors.Join(errs...)
}

func scriptName(s string) string {
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimSuffix(s, ".bt")
}

func header(script string) string {
	var src []byte
	if strings.ContainsRune(script, '/') {
		src, _ = os.ReadFile(script)
	} else if h, err := bpftrace.Header(script); err == nil {
		return h
	}
	line, _, _ := strings.Cut(string(src), "\n")
	return strings.TrimSpace(strings.TrimPrefix(line, "//"))
}

// merge sums the outputs of one script run on several pids: counts and
// stats add, histogram buckets with the same bounds add.
func merge(outs []*trace.Output) *trace.Output {
	if len(outs) == 1 {
		return outs[0]
	}
	m := &trace.Output{Maps: map[string]map[string]int64{}, Hists: map[string]map[string][]trace.Bucket{}, Stats: map[string]map[string]trace.Stats{}}
	for _, o := range outs {
		if o == nil {
			continue
		}
		m.AttachedProbes += o.AttachedProbes
		m.Lines += o.Lines
		m.Printf = append(m.Printf, o.Printf...)
		for name, kv := range o.Maps {
			// @syscalls keys are numbers; summing by number is the same as by name.
			if m.Maps[name] == nil {
				m.Maps[name] = map[string]int64{}
			}
			for k, v := range kv {
				m.Maps[name][k] += v
			}
		}
		for name, kv := range o.Hists {
			if m.Hists[name] == nil {
				m.Hists[name] = map[string][]trace.Bucket{}
			}
			for k, bs := range kv {
				m.Hists[name][k] = mergeBuckets(m.Hists[name][k], bs)
			}
		}
		for name, kv := range o.Stats {
			if m.Stats[name] == nil {
				m.Stats[name] = map[string]trace.Stats{}
			}
			for k, st := range kv {
				cur := m.Stats[name][k]
				cur.Count += st.Count
				cur.Total += st.Total
				if cur.Count > 0 {
					cur.Average = cur.Total / cur.Count
				}
				m.Stats[name][k] = cur
			}
		}
	}
	return m
}

func mergeBuckets(a, b []trace.Bucket) []trace.Bucket {
	type bounds struct{ min, max int64 }
	sum := map[bounds]uint64{}
	for _, x := range append(append([]trace.Bucket{}, a...), b...) {
		sum[bounds{x.Min, x.Max}] += x.Count
	}
	out := make([]trace.Bucket, 0, len(sum))
	for k, c := range sum {
		out = append(out, trace.Bucket{Min: k.min, Max: k.max, Count: c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Min < out[j].Min })
	return out
}
