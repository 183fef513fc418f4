package tracebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ipclab/logagg/bpftrace"
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

// ErrBadSpec is returned (wrapped) for an invalid Spec or OverheadSpec.
var ErrBadSpec = errors.New("bad trace spec")

// Spec is one traced run: one aggregator listening on Transport, Producers
// producer processes each sending Count records of Size bytes at Rate/s.
type Spec struct {
	AggregatorBin string
	ProducerBin   string
	Transport     string // seed name: unixsock, tcp, unixgram, udp, fifo, shm, mq
	Size          int    // record bytes; default 100
	Count         int    // records per producer; default 2000
	Rate          int    // records/s per producer; default 2000 (0 is refused: it would flood)
	Producers     int    // default 1
	Probes        []Probe
	// Dir holds sockets and the output; default a new temporary directory,
	// removed at the end.
	Dir string
	// Trace is passed to trace.Start for every session (Bpftrace, Stderr...).
	Trace trace.Options
	// Stderr, if set, receives the aggregator's log lines.
	Stderr io.Writer
}

func (s *Spec) fill() error {
	if s.Size == 0 {
		s.Size = 100
	}
	if s.Count == 0 {
		s.Count = 2000
	}
	if s.Rate == 0 {
		s.Rate = 2000
	}
	if s.Producers == 0 {
		s.Producers = 1
	}
	switch {
	case s.AggregatorBin == "" || s.ProducerBin == "":
		return fmt.Errorf("%w: the aggregator and producer binaries are needed", ErrBadSpec)
	case s.Transport == "":
		return fmt.Errorf("%w: no transport", ErrBadSpec)
	case s.Size < 1 || s.Count < 1 || s.Rate < 1 || s.Producers < 1:
		return fmt.Errorf("%w: size, count, rate and producers must be positive", ErrBadSpec)
	case len(s.Probes) == 0:
		return fmt.Errorf("%w: no script to run", ErrBadSpec)
	}
	return nil
}

// Bucket is one histogram bucket: values v with Min <= v <= Max were seen
// Count times. Min is absent on an underflow bucket and Max on an overflow
// bucket (bpftrace prints "(..., 0)" and "[N, ...)").
type Bucket struct {
	Min   *int64 `json:"min,omitempty"`
	Max   *int64 `json:"max,omitempty"`
	Count uint64 `json:"count"`
}

// Stat is a stats()/avg() aggregate.
type Stat struct {
	Count   int64 `json:"count"`
	Average int64 `json:"average"`
	Total   int64 `json:"total"`
}

// Row is what one script showed on one side of one transport's run. Its
// shape is the same for every script, so a report can plot any of them:
// each map as bars (key -> count), each histogram as a bucket chart.
type Row struct {
	Transport string `json:"transport"`
	Script    string `json:"script"`
	Header    string `json:"header,omitempty"` // the script's "name - what it answers"
	Target    Target `json:"target"`
	PIDs      []int  `json:"pids"`
	Producers int    `json:"producers"`
	Size      int    `json:"size"`
	Rate      int    `json:"rate"`
	// Records is what the producers sent (their own count): the
	// denominator of every per-record figure.
	Records int64 `json:"records"`
	// Written is the number of lines in the aggregator's output when the
	// trace stopped.
	Written int64 `json:"written"`
	// ProducerWrites is the producers' own count of write calls.
	ProducerWrites int64 `json:"producer_writes"`
	// Maps: map name ("@syscalls") -> key -> value. producer_syscalls'
	// @syscalls is keyed by syscall name (resolved from the x86_64 number).
	Maps  map[string]map[string]int64    `json:"maps"`
	Hists map[string]map[string][]Bucket `json:"hists"`
	Stats map[string]map[string]Stat     `json:"stats,omitempty"`
	// Printf holds the first MaxPrintf printf lines; PrintfLines counts all.
	Printf      []string `json:"printf,omitempty"`
	PrintfLines int      `json:"printf_lines"`
	AttachMs    float64  `json:"attach_ms"`
}

// attachSettle is the pause between attachment and releasing the producers.
const attachSettle = 250 * time.Millisecond

// MaxPrintf bounds Row.Printf.
const MaxPrintf = 200

// Result is one traced run.
type Result struct {
	Transport string  `json:"transport"`
	Sent      int64   `json:"sent"`
	Failed    int64   `json:"failed"`
	Written   int64   `json:"written"`
	ElapsedS  float64 `json:"elapsed_s"` // release of the producers to the end of the wait for the output
	Rows      []Row   `json:"rows"`      // one per Spec.Probes entry, in order
}

// session is one bpftrace attached to one pid for one probe.
type session struct {
	probe int
	pid   int
	s     *pinned
}

// Run starts the aggregator, the gated producers and one bpftrace per
// (probe, traced process), releases the producers, waits until they have
// exited and the aggregator has written what it received, stops bpftrace
// and returns what each script printed.
func Run(ctx context.Context, s Spec) (*Result, error) {
	// The aggregator and the producers get Pdeathsig from the forking
	// thread: keep that thread alive and ours until they are gone (see
	// pinned).
	type result struct {
		res *Result
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

func run(ctx context.Context, s Spec) (res *Result, err error) {
	if err := s.fill(); err != nil {
		return nil, err
	}
	if err := preflight(); err != nil {
		return nil, err
	}
	if s.Dir == "" {
		d, err := os.MkdirTemp("", "lgtr")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		s.Dir = d
	}
	agg, err := startAggregator(ctx, s.AggregatorBin, s.Transport, s.Dir, s.Stderr)
	if err != nil {
		return nil, err
	}
	aggStopped := false
	defer func() {
		if !aggStopped {
			agg.kill()
		}
	}()

	var prods []*gatedProc
	defer func() {
		for _, p := range prods {
			p.kill() // no-op wait for producers that already exited
		}
	}()
	for i := 0; i < s.Producers; i++ {
		p, err := startGated(s.ProducerBin, producerArgs(s.Transport, agg.url, s.Size, s.Count, s.Rate, fmt.Sprintf("%s-%d", s.Transport, i)))
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
				want = append(want, session{probe: i, pid: pr.pid()})
			}
		case TargetAll:
			want = append(want, session{probe: i, pid: 0})
		default:
			return nil, fmt.Errorf("%w: target %q", ErrBadSpec, p.Target)
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
	start := time.Now()
	for _, p := range prods {
		if err := p.release(); err != nil {
			return nil, fmt.Errorf("release producer: %w", err)
		}
	}
	res = &Result{Transport: s.Transport}
	var writes int64
	var prodErrs []error
	for _, p := range prods {
		sum, err := p.summary()
		if err != nil {
			prodErrs = append(prodErrs, err)
		}
		res.Sent += sum.Sent
		res.Failed += sum.Failed
		writes += sum.Writes
	}
	if res.Sent == 0 {
		return nil, fmt.Errorf("%s: producers sent nothing: %w", s.Transport, errors.Join(prodErrs...))
	}
	res.Written = waitWritten(ctx, agg.output, res.Sent, time.Second, 30*time.Second)
	res.ElapsedS = time.Since(start).Seconds()
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
		row.Transport, row.Script, row.Target = s.Transport, scriptName(p.Script), p.Target
		row.Header = header(p.Script)
		row.PIDs = pids[i]
		sort.Ints(row.PIDs)
		row.Producers, row.Size, row.Rate = s.Producers, s.Size, s.Rate
		row.Records, row.Written, row.ProducerWrites = res.Sent, res.Written, writes
		row.AttachMs = float64(attach[i].Microseconds()) / 1e3
		res.Rows = append(res.Rows, row)
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

// rowFrom converts a decoded output into a Row's generic fields.
func rowFrom(o *trace.Output) Row {
	r := Row{Maps: map[string]map[string]int64{}, Hists: map[string]map[string][]Bucket{}}
	if o == nil {
		return r
	}
	for name, kv := range o.Maps {
		if name == "@syscalls" {
			kv = o.SyscallCounts()
		}
		r.Maps[name] = kv
	}
	for name, kv := range o.Hists {
		h := make(map[string][]Bucket, len(kv))
		for k, bs := range kv {
			h[k] = convertBuckets(bs)
		}
		r.Hists[name] = h
	}
	if len(o.Stats) > 0 {
		r.Stats = map[string]map[string]Stat{}
		for name, kv := range o.Stats {
			st := make(map[string]Stat, len(kv))
			for k, v := range kv {
				st[k] = Stat{Count: v.Count, Average: v.Average, Total: v.Total}
			}
			r.Stats[name] = st
		}
	}
	r.PrintfLines = len(o.Printf)
	r.Printf = o.Printf[:min(len(o.Printf), MaxPrintf)]
	return r
}

func convertBuckets(bs []trace.Bucket) []Bucket {
	out := make([]Bucket, len(bs))
	for i, b := range bs {
		out[i].Count = b.Count
		if b.Min != math.MinInt64 {
			v := b.Min
			out[i].Min = &v
		}
		if b.Max != math.MaxInt64 {
			v := b.Max
			out[i].Max = &v
		}
	}
	return out
}

// Total sums a count map of the row.
func (r *Row) Total(name string) int64 {
	var t int64
	for _, v := range r.Maps[name] {
		t += v
	}
	return t
}

// HistTotal sums every bucket of every key of a histogram of the row.
func (r *Row) HistTotal(name string) uint64 {
	var t uint64
	for _, bs := range r.Hists[name] {
		for _, b := range bs {
			t += b.Count
		}
	}
	return t
}
