// Package calibrate measures what the machine's basic operations cost
// (seed 001's cgt, gp, rdtscp and sy, plus a cross-core cache-line round
// trip), and checks the machine properties those figures rest on (TSC
// flags, frequency governor, SMT siblings, clocksource), so every ipcbench
// result can say what "fast" meant on the host it ran on.
//
// Method: each operation runs in batches of a fixed count on a locked OS
// thread, and a batch's figure is its mean time per operation (one
// operation of a few ns is too short to time alone). A row reports the
// median of the batch means, so a batch hit by an interrupt or a
// preemption does not move it, and the fastest and slowest batch means,
// which are not the fastest and slowest single operations. Where the TSC
// rate is known every figure is also given in cycles (TSC ticks, seed 001's
// unit). TSC figures come from the C helper cref/src/calibrate.c (rdtscp
// has no Go spelling without assembly).
//
// Run and Quick are safe to call from any goroutine but not concurrently
// with each other or with another benchmark (they compete for CPUs).
package calibrate

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipclab/logagg/cref"
	"github.com/ipclab/logagg/internal/bench"
	"golang.org/x/sys/unix"
)

// Kind is the subcommand and the saved result's kind.
const Kind = "calibrate"

// Options configure Run.
type Options struct {
	Quick bool // fewer, shorter batches (about a quarter second in all)
	CRef  bool // run the C helper for TSC and C clock_gettime figures
	// Root is where /proc and /sys are read for the machine checks; empty
	// means "/". Tests point it at a synthetic tree.
	Root string
}

// Row is one measured operation, per operation. The JSON names predate
// the honest Go names and are kept so older results still load.
type Row struct {
	Name string `json:"name"`
	// MedianNs is the median over batches of the per-batch mean.
	MedianNs float64 `json:"median"`
	// FastestBatchNs and SlowestBatchNs are the lowest and highest
	// per-batch means; zero for a figure measured as one batch.
	FastestBatchNs float64 `json:"min"`
	SlowestBatchNs float64 `json:"max"`
	Batches        int     `json:"batches,omitempty"`
	OpsPerBatch    int     `json:"ops_per_batch,omitempty"`
	// TSCPerNs converts the ns figures to cycles (TSC ticks); zero when
	// the TSC rate is unknown.
	TSCPerNs float64 `json:"tsc_per_ns,omitempty"`
	Source   string  `json:"source"` // how it was measured
}

// Params are the Options saved in the result.
type Params struct {
	CRef  bool `json:"c_reference"`
	Quick bool `json:"quick"`
}

// Result is what Run returns: the measurements, the calibration block
// every other result carries, and what the reader must know.
type Result struct {
	Params      Params
	Calibration bench.Calibration
	Rows        []Row
	Notes       []string
}

// Quick runs a short calibration with the C helper if a compiler exists.
func Quick() (bench.Calibration, error) {
	r, err := Run(context.Background(), Options{Quick: true, CRef: true})
	if err != nil {
		return bench.Calibration{}, err
	}
	return r.Calibration, nil
}

var epoch = time.Now()

// batches runs op count times per batch on a locked thread and returns the
// per-op means of each batch.
func batches(n, count int, op func(int)) []float64 {
	out := make([]float64, n)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		op(count / 10) // warm caches and the vDSO page
		for b := range out {
			t0 := time.Now()
			op(count)
			out[b] = float64(time.Since(t0)) / float64(count)
		}
		close(done)
	}()
	<-done
	return out
}

func summarize(name, src string, count int, batchMeans []float64) Row {
	s := slices.Clone(batchMeans)
	slices.Sort(s)
	return Row{Name: name, MedianNs: bench.NearestRank(s, 0.5), FastestBatchNs: s[0], SlowestBatchNs: s[len(s)-1],
		Batches: len(s), OpsPerBatch: count, Source: src}
}

var sink atomic.Int64

// Run measures. It fails only if ctx is done; parts that cannot run (one
// CPU, no compiler) are left zero with a note.
func Run(ctx context.Context, o Options) (*Result, error) {
	nb, scale := 31, 1
	if o.Quick {
		nb, scale = 11, 10
	}
	root := o.Root
	if root == "" {
		root = "/"
	}
	res := &Result{Params: Params{CRef: o.CRef, Quick: o.Quick}}
	cal := &res.Calibration
	cal.Checks = MachineChecks(root)
	measure := func(name, src string, count int, op func(int)) float64 {
		r := summarize(name, src, count, batches(nb, count, op))
		res.Rows = append(res.Rows, r)
		return r.MedianNs
	}

	cal.TimeNowNs = measure("time.Now", "Go, vDSO wall+monotonic", 200000/scale, func(n int) {
		var x int64
		for i := 0; i < n; i++ {
			x += time.Now().UnixNano()
		}
		sink.Add(x)
	})
	cal.MonoNs = measure("monotonic clock", "Go time.Since(epoch), one vDSO clock_gettime", 200000/scale, func(n int) {
		var x int64
		for i := 0; i < n; i++ {
			x += int64(time.Since(epoch))
		}
		sink.Add(x)
	})
	// RawSyscall: the kernel entry and exit only, like C's syscall(2);
	// unix.Getpid would be the same syscall plus Go's entersyscall.
	cal.GetpidNs = measure("getpid", "raw syscall SYS_GETPID", 50000/scale, func(n int) {
		for i := 0; i < n; i++ {
			unix.RawSyscall(unix.SYS_GETPID, 0, 0, 0)
		}
	})
	cal.SchedYieldNs = measure("sched_yield", "raw syscall, nothing else runnable on the CPU", 20000/scale, func(n int) {
		for i := 0; i < n; i++ {
			unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		}
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Short batches, many of them: on a shared VM a 10 ms batch is often
	// hit by a preemption of one side, which the median then absorbs.
	if r, cpus, err := cacheLine(3*nb, 10000/scale); err != nil {
		cal.Notes = append(cal.Notes, "cache-line round trip not measured: "+err.Error())
	} else {
		res.Rows = append(res.Rows, r)
		cal.CacheLineRTTNs, cal.CacheLineCPUs = r.MedianNs, cpus
		if sameCore(SiblingGroups(root), cpus) {
			cal.Notes = append(cal.Notes, fmt.Sprintf("the cache-line round trip ran on CPUs %s, SMT siblings of one core: it measures a shared L1, not a cross-core transfer", cpuList(cpus)))
		}
	}
	if o.CRef {
		if err := cHelper(ctx, o.Quick, res); err != nil {
			cal.Notes = append(cal.Notes, "TSC figures not measured: "+err.Error())
		}
	}
	if cal.TSCPerNs > 0 {
		for i := range res.Rows {
			res.Rows[i].TSCPerNs = cal.TSCPerNs
		}
	}
	res.Notes = cal.Notes
	return res, ctx.Err()
}

// sameCore reports whether all cpus are in one sibling group.
func sameCore(groups [][]int, cpus []int) bool {
	for _, g := range groups {
		if len(g) > 1 && !slices.ContainsFunc(cpus, func(c int) bool { return !slices.Contains(g, c) }) {
			return true
		}
	}
	return false
}

// cacheLine ping-pongs one atomic word between threads pinned on the first
// two allowed CPUs and returns ns per round trip.
func cacheLine(nb, count int) (Row, []int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return Row{}, nil, err
	}
	var cpus []int
	for i := 0; i < len(set)*64 && len(cpus) < 2; i++ {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	if len(cpus) < 2 {
		return Row{}, nil, fmt.Errorf("needs two CPUs, allowed %v", cpus)
	}
	// The word sits alone on its cache line so nothing else bounces.
	var line struct {
		_ [64]byte
		v atomic.Uint64
		_ [64]byte
	}
	total := nb * count
	var dead atomic.Bool // a side could not pin; the other must stop waiting
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	pin := func(cpu int) bool {
		var s unix.CPUSet
		s.Set(cpu)
		if err := unix.SchedSetaffinity(0, &s); err != nil {
			errc <- err
			return false
		}
		return true
	}
	wg.Add(1)
	go func() { // the echo side: answers odd with the next even value
		defer wg.Done()
		runtime.LockOSThread() // never unlocked: the pinned thread dies with the goroutine
		if !pin(cpus[1]) {
			dead.Store(true)
			return
		}
		for i := uint64(1); i < 2*uint64(total+count/10); i += 2 {
			for {
				v := line.v.Load()
				if v == i {
					break
				}
				if v == 0 && dead.Load() {
					return
				}
			}
			line.v.Store(i + 1)
		}
	}()
	res := make(chan []float64, 1)
	go func() {
		runtime.LockOSThread()
		if !pin(cpus[0]) {
			dead.Store(true)
			res <- nil
			return
		}
		seq := uint64(0)
		rtt := func(n int) bool {
			for i := 0; i < n; i++ {
				seq++
				line.v.Store(seq)
				seq++
				for line.v.Load() != seq {
					if dead.Load() {
						return false
					}
				}
			}
			return true
		}
		if !rtt(count / 10) {
			res <- nil
			return
		}
		out := make([]float64, nb)
		for b := range out {
			t0 := time.Now()
			if !rtt(count) {
				res <- nil
				return
			}
			out[b] = float64(time.Since(t0)) / float64(count)
		}
		res <- out
	}()
	v := <-res
	wg.Wait()
	if v == nil {
		return Row{}, nil, <-errc
	}
	return summarize("cache-line round trip", fmt.Sprintf("atomic ping-pong, CPUs %d and %d", cpus[0], cpus[1]), count, v), cpus, nil
}

type cOut struct {
	TSCPerNs       float64 `json:"tsc_per_ns"`
	RdtscpNs       float64 `json:"rdtscp_ns"`
	ClockGettimeNs float64 `json:"clock_gettime_ns"`
}

// cHelper runs cref/src/calibrate.c: each of its figures is one mean over
// a million operations, so its rows have one batch and no spread.
func cHelper(ctx context.Context, quick bool, res *Result) error {
	if runtime.GOARCH != "amd64" {
		return fmt.Errorf("rdtscp helper is x86-64 only")
	}
	bin, err := cref.Build(cref.Calibrate)
	if err != nil {
		return err
	}
	ms := 100
	if quick {
		ms = 20
	}
	out, err := exec.CommandContext(ctx, bin, strconv.Itoa(ms)).Output()
	if err != nil {
		return fmt.Errorf("run %s: %w", bin, err)
	}
	var c cOut
	if err := json.Unmarshal(out, &c); err != nil {
		return fmt.Errorf("decode %q: %w", out, err)
	}
	cal := &res.Calibration
	cal.TSCPerNs, cal.RdtscpNs, cal.ClockGettimeCNs = c.TSCPerNs, c.RdtscpNs, c.ClockGettimeNs
	const src = "C helper (cref/src/calibrate.c), one mean over 1M operations"
	res.Rows = append(res.Rows,
		Row{Name: "clock_gettime (C)", MedianNs: c.ClockGettimeNs, Batches: 1, OpsPerBatch: cHelperOps, Source: src},
		Row{Name: "rdtscp", MedianNs: c.RdtscpNs, Batches: 1, OpsPerBatch: cHelperOps, Source: src})
	return nil
}

// cHelperOps is the C helper's loop count (N in calibrate.c).
const cHelperOps = 1000000
