// Package throughput drives the real aggregator with real producer processes
// and accounts for every record: N producers → aggregator → file, then the
// output file is scanned for the producers' sequence stamps to count what
// arrived, what is missing, what was duplicated and what came out of order.
//
// It measures, it does not assert: callers (the demo, `ipcbench throughput`,
// the end-to-end tests) decide what the numbers must be.
package throughput

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ipclab/logagg/internal/bench/harness"
	"github.com/ipclab/logagg/internal/seqstamp"
	"golang.org/x/sys/unix"
)

// Spec is one run: one daemon serving Transports, Producers producer
// processes on each transport.
type Spec struct {
	// Daemon is the process under test (default: our aggregator, built at
	// AggregatorBin, as a harness.AggregatorDaemon).
	Daemon        harness.Daemon
	AggregatorBin string
	ProducerBin   string
	Dir           string   // work directory for sockets and the output file
	Transports    []string // seed names: unixsock, tcp, unixgram, udp, fifo, shm, mq
	Producers     int      // per transport
	Size          int      // record size in bytes
	Duration      time.Duration
	Count         int    // records per producer (0 = until Duration)
	Rate          int    // records/s per producer (0 = flat out)
	Buffer        int    // producer write buffer (0 = one write per record)
	Format        string // json (default), raw, rfc3164, rfc5424
	// Ack runs the producers of unix stream and TCP sockets in the
	// acknowledged mode (producer --ack): they count only what the
	// aggregator acknowledged as written, and keep the rest until then.
	Ack bool
	// ExtraArgs are passed to our aggregator.
	ExtraArgs []string
	// DiscardOutput has our aggregator write to /dev/null and takes the
	// records written per transport from its metrics instead of from the
	// file. It measures ingestion without the cost of the page cache (on
	// this VM, first-touch page-cache writes run at ~0.5 GB/s, which caps
	// the fastest transports). Duplicates and reordering cannot be seen
	// this way; file runs check those.
	DiscardOutput bool
	// CPUs places the processes: "" lets the scheduler decide; "same" pins
	// producers and daemon to CPU 0; "split" pins producers to CPU 0 and
	// the daemon to CPU 1. On this VM a wake-up across vCPUs costs tens of
	// µs, so where the scheduler happens to put the two sides swings a run
	// by 3× (TCP most); pinning makes the two cases separately repeatable.
	CPUs string
	// Stderr receives the daemon's stderr (nil = kept only for errors).
	Stderr io.Writer
	// AfterStart and BeforeStop, both optional, let a caller act on the
	// daemon around the measured part of the run (ipcbench conns opens
	// idle connections in one, samples the daemon and closes them in the
	// other). AfterStart runs once the daemon accepts input and is
	// pinned, before any producer starts and before the clock of
	// records/s starts; an error ends the run. BeforeStop runs after the
	// producers exited and the daemon wrote everything, before it is
	// stopped.
	AfterStart func(ctx context.Context, d harness.Running) error
	BeforeStop func(d harness.Running)
}

// ValidCPUs checks a Spec.CPUs value.
func ValidCPUs(s string) error {
	switch s {
	case "", "any", "same", "split":
		return nil
	}
	return fmt.Errorf("cpus %q: want any, same or split", s)
}

// placement returns the CPUs of the producers and of the daemon (-1: any).
func placement(cpus string) (producer, daemon int) {
	switch cpus {
	case "same":
		return 0, 0
	case "split":
		return 0, 1
	}
	return -1, -1
}

// pinProcess pins every thread of pid to cpu. Threads the process starts
// later inherit the mask from the pinned thread that creates them.
func pinProcess(pid, cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
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
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("pin thread %d of %d to CPU %d: %w", tid, pid, cpu, err)
			}
		}
	}
	return nil
}

// Row is what one transport achieved in a run.
type Row struct {
	Daemon      string  `json:"daemon"`
	Transport   string  `json:"transport"`
	Producers   int     `json:"producers"`
	Size        int     `json:"size"`
	Buffer      int     `json:"buffer"`
	Sent        int64   `json:"sent"`         // producers' own count of records handed to the kernel
	SendFailed  int64   `json:"send_failed"`  // producers' count of records they could not send
	Written     int64   `json:"written"`      // stamped lines of this transport in the output
	Unique      int64   `json:"unique"`       // distinct (producer, seq) pairs
	Lost        int64   `json:"lost"`         // sent but not written
	Duplicated  int64   `json:"duplicated"`   // written more than once
	Reordered   int64   `json:"reordered"`    // arrived after a higher seq of the same producer
	KernelDrops int64   `json:"kernel_drops"` // the daemon's kernel_rxq_ovfl counter (ours only)
	Elapsed     float64 `json:"elapsed_s"`
	RecordsPerS float64 `json:"records_per_s"` // written / elapsed
	MBPerS      float64 `json:"mb_per_s"`
	Offered     float64 `json:"offered_ratio"` // unique / sent
	ProdCPUNs   float64 `json:"producer_cpu_ns_per_record"`
	// The daemon's figures for the whole run (all its transports).
	DaemonCPUNs  float64 `json:"daemon_cpu_ns_per_record"`
	DaemonRSSKiB int64   `json:"daemon_peak_rss_kib"`
	// VsUnixsock is records/s over the BaselineTransport row of the same
	// cell (VsBaseline; 0: none, or this is it). Tables computes it from
	// the rows; it is saved for readers of the JSON.
	VsUnixsock float64 `json:"vs_unixsock,omitempty"`
	// The reference daemon's figures in the same cell (Options.Reference,
	// rsyslog), from its median pass; empty where it does not serve the
	// transport. Tables sets ours against them.
	RefDaemon      string  `json:"ref_daemon,omitempty"`
	RefRecordsPerS float64 `json:"ref_records_per_s,omitempty"`
	RefProdCPUNs   float64 `json:"ref_producer_cpu_ns_per_record,omitempty"`
	RefRSSKiB      int64   `json:"ref_daemon_peak_rss_kib,omitempty"`
}

// UnmarshalJSON also reads throughput results saved before the daemon's
// figures were the row's own, which carried them only as
// aggregator_cpu_ns_per_record and aggregator_peak_rss_kib.
func (r *Row) UnmarshalJSON(b []byte) error {
	type row Row // without this method
	var v struct {
		row
		OldCPUNs  float64 `json:"aggregator_cpu_ns_per_record"`
		OldRSSKiB int64   `json:"aggregator_peak_rss_kib"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = Row(v.row)
	if r.DaemonCPUNs == 0 && r.DaemonRSSKiB == 0 {
		r.DaemonCPUNs, r.DaemonRSSKiB = v.OldCPUNs, v.OldRSSKiB
	}
	return nil
}

// Measurement is what Measure returns: one run of one Spec.
type Measurement struct {
	Daemon        string  `json:"daemon"`
	Rows          []Row   `json:"rows"`
	AggCPUNs      float64 `json:"daemon_cpu_ns_per_record"`
	AggPeakRSSKiB int64   `json:"daemon_peak_rss_kib"`
	Elapsed       float64 `json:"elapsed_s"`
	Output        string  `json:"output"`
	Config        string  `json:"config,omitempty"` // the daemon's configuration, saved for peers
}

// peakRSSKiB reads the high-water RSS (VmHWM) of a live process. wait4's
// ru_maxrss cannot be used: after fork+exec it also counts the RSS the
// forked copy of this (large) benchmark process had before exec.
func peakRSSKiB(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				v, _ := strconv.ParseInt(f[0], 10, 64)
				return v
			}
		}
	}
	return 0
}

// Measure performs one run of s and returns its accounting. Run, the
// throughput kind, calls it once per cell of its grid; peers, conns and the
// demo call it with their own daemons and hooks.
func Measure(ctx context.Context, s Spec) (*Measurement, error) {
	if s.Producers <= 0 {
		s.Producers = 1
	}
	if s.Format == "" {
		s.Format = "json"
	}
	if err := ValidCPUs(s.CPUs); err != nil {
		return nil, err
	}
	producerCPU, daemonCPU := placement(s.CPUs)
	if max(producerCPU, daemonCPU) >= runtime.NumCPU() {
		return nil, fmt.Errorf("cpus %s needs CPU %d; this machine has %d", s.CPUs, max(producerCPU, daemonCPU), runtime.NumCPU())
	}
	if s.Duration <= 0 && s.Count <= 0 {
		s.Duration = 5 * time.Second
	}
	if s.Daemon == nil {
		s.Daemon = &harness.AggregatorDaemon{Bin: s.AggregatorBin, ExtraArgs: s.ExtraArgs}
		if s.DiscardOutput {
			s.Daemon = &harness.AggregatorDaemon{Bin: s.AggregatorBin, ExtraArgs: s.ExtraArgs, Output: os.DevNull}
		}
	} else if s.DiscardOutput {
		return nil, errors.New("throughput: DiscardOutput needs our aggregator as the daemon")
	}
	d, err := s.Daemon.Start(ctx, s.Dir, s.Transports, s.Stderr)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			d.Stop()
		}
	}()
	if daemonCPU >= 0 {
		if err := pinProcess(d.Pid(), daemonCPU); err != nil {
			return nil, err
		}
	}
	if s.AfterStart != nil {
		if err := s.AfterStart(ctx, d); err != nil {
			return nil, err
		}
	}

	start := time.Now()
	type prodResult struct {
		transport string
		summary   harness.ProducerSummary
		cpu       time.Duration
		err       error
	}
	results := make(chan prodResult, len(s.Transports)*s.Producers)
	var wg sync.WaitGroup
	for _, t := range s.Transports {
		for i := 0; i < s.Producers; i++ {
			prod := harness.Producer{Bin: s.ProducerBin, Transport: t, URL: d.URL(t), Size: s.Size, ID: fmt.Sprintf("%s-%d", t, i),
				Rate: s.Rate, Count: s.Count, Duration: s.Duration, Buffer: s.Buffer, Format: s.Format, Ack: s.Ack}
			if producerCPU >= 0 {
				prod.CPUs = strconv.Itoa(producerCPU)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := prodResult{transport: t}
				p, err := prod.Start(ctx)
				if err == nil {
					r.summary, err = p.Wait()
					r.cpu = p.CPU()
				}
				r.err = err
				results <- r
			}()
		}
	}
	wg.Wait()
	close(results)

	rows := map[string]*Row{}
	for _, t := range s.Transports {
		rows[t] = &Row{Daemon: s.Daemon.Name(), Transport: t, Producers: s.Producers, Size: s.Size, Buffer: s.Buffer}
	}
	var prodErrs []error
	prodCPU := map[string]time.Duration{}
	for r := range results {
		if r.err != nil {
			prodErrs = append(prodErrs, r.err)
		}
		rows[r.transport].Sent += r.summary.Sent
		rows[r.transport].SendFailed += r.summary.Failed
		prodCPU[r.transport] += r.cpu
	}

	// The daemon has written everything once its output stops growing; the
	// elapsed time ends at the last growth, so a daemon's shutdown behaviour
	// counts neither against nor for its throughput.
	// A daemon that writes no file (our aggregator into /dev/null, the null
	// reader) is accounted for by its own count of records written.
	countsOnly := d.Output() == ""
	var written map[string]int64 // per transport, when countsOnly
	var lastGrowth time.Time
	if countsOnly {
		wc, ok := d.(harness.WrittenCounter)
		if !ok {
			return nil, errors.New("throughput: the daemon does not export records written")
		}
		lastGrowth = waitQuiet(func() int64 {
			written = wc.Written()
			var n int64
			for _, v := range written {
				n += v
			}
			return n
		}, start, 500*time.Millisecond, 60*time.Second)
	} else {
		lastGrowth = waitQuiet(func() int64 { return fileSize(d.Output()) }, start, 500*time.Millisecond, 60*time.Second)
	}
	drops := d.KernelDrops()
	rss := peakRSSKiB(d.Pid())
	if s.BeforeStop != nil {
		s.BeforeStop(d)
	}
	st, err := d.Stop()
	stopped = true
	if err != nil {
		return nil, err
	}
	elapsed := lastGrowth.Sub(start)
	if elapsed <= 0 {
		elapsed = time.Since(start)
	}
	res := &Measurement{Daemon: s.Daemon.Name(), Elapsed: elapsed.Seconds(), Output: d.Output(), Config: d.Config(), AggPeakRSSKiB: rss}

	// Account for every stamped line.
	counts := map[string]*producerCount{}
	if !countsOnly {
		if counts, err = scan(d.Output()); err != nil {
			return nil, err
		}
	}
	var totalWritten int64
	for _, t := range s.Transports {
		row := rows[t]
		if countsOnly {
			row.Written, row.Unique = written[t], written[t]
		}
		for i := 0; i < s.Producers; i++ {
			c := counts[fmt.Sprintf("%s-%d", t, i)]
			if c == nil {
				continue
			}
			row.Written += c.lines
			row.Unique += int64(len(c.seen))
			row.Duplicated += c.lines - int64(len(c.seen))
			row.Reordered += c.reordered
		}
		row.Lost = row.Sent - row.Unique
		row.KernelDrops = drops[t]
		row.Elapsed = elapsed.Seconds()
		row.RecordsPerS = float64(row.Written) / elapsed.Seconds()
		row.MBPerS = row.RecordsPerS * float64(s.Size) / 1e6
		if row.Sent > 0 {
			row.Offered = float64(row.Unique) / float64(row.Sent)
			row.ProdCPUNs = float64(prodCPU[t].Nanoseconds()) / float64(row.Sent)
		}
		totalWritten += row.Written
	}
	if st != nil && totalWritten > 0 {
		res.AggCPUNs = float64((st.UserTime() + st.SystemTime()).Nanoseconds()) / float64(totalWritten)
	}
	for _, t := range s.Transports {
		row := rows[t]
		row.DaemonCPUNs, row.DaemonRSSKiB = res.AggCPUNs, res.AggPeakRSSKiB
		res.Rows = append(res.Rows, *row)
	}
	return res, errors.Join(prodErrs...)
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return fi.Size()
}

// waitQuiet polls progress (the output's size, or records written) until it
// has not grown for quiet (or limit passes) and returns when it last grew.
func waitQuiet(progress func() int64, since time.Time, quiet, limit time.Duration) time.Time {
	last := since
	var size int64 = -1
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if n := progress(); n >= 0 && n != size {
			size = n
			last = time.Now()
		}
		if time.Since(last) >= quiet {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return last
}

type producerCount struct {
	seen      map[uint64]struct{}
	lines     int64
	maxSeq    uint64
	reordered int64
}

// scan reads the output file and its rotated segments, counting stamps per
// producer id.
func scan(output string) (map[string]*producerCount, error) {
	files, _ := filepath.Glob(output + ".*")
	sort.Strings(files)
	files = append(files, output)
	counts := map[string]*producerCount{}
	for _, f := range files {
		if strings.HasSuffix(f, ".checkpoint") {
			continue
		}
		fh, err := os.Open(f)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, err
		}
		r := bufio.NewReaderSize(fh, 1<<20)
		for {
			line, err := r.ReadSlice('\n')
			if len(line) > 0 {
				if st, ok := seqstamp.Find(line); ok {
					c := counts[st.Producer]
					if c == nil {
						c = &producerCount{seen: map[uint64]struct{}{}}
						counts[st.Producer] = c
					}
					c.lines++
					c.seen[st.Seq] = struct{}{}
					if st.Seq < c.maxSeq {
						c.reordered++
					} else {
						c.maxSeq = st.Seq
					}
				}
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				for errors.Is(err, bufio.ErrBufferFull) { // a line over 1 MiB: skip the rest of it
					_, err = r.ReadSlice('\n')
				}
			}
			if err != nil {
				break
			}
		}
		fh.Close()
	}
	return counts, nil
}

// WriteMeasurement prints one Measurement as text (the end-to-end tests
// log it); `ipcbench throughput` prints Tables.
func WriteMeasurement(w io.Writer, res *Measurement) {
	fmt.Fprintf(w, "%-9s %5s %6s %10s %10s %8s %5s %9s %12s %8s\n",
		"transport", "prods", "size", "sent", "written", "lost", "dup", "kdrops", "records/s", "MB/s")
	for _, r := range res.Rows {
		fmt.Fprintf(w, "%-9s %5d %6d %10d %10d %8d %5d %9d %12.0f %8.1f\n",
			r.Transport, r.Producers, r.Size, r.Sent, r.Written, r.Lost, r.Duplicated, r.KernelDrops, r.RecordsPerS, r.MBPerS)
	}
	fmt.Fprintf(w, "%s: %.0f ns CPU per record, peak RSS %d KiB, %.2fs elapsed; output %s\n",
		res.Daemon, res.AggCPUNs, res.AggPeakRSSKiB, res.Elapsed, res.Output)
}
