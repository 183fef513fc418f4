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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ipclab/logagg/internal/seqstamp"
)

// Spec is one run: one aggregator serving Transports, Producers producer
// processes on each transport.
type Spec struct {
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
	// Output is the aggregator's output file (default Dir/aggregated_logs.jsonl).
	Output string
	// ExtraArgs are passed to the aggregator.
	ExtraArgs []string
	// Stderr receives the children's stderr (nil = discarded unless they fail).
	Stderr io.Writer
}

// Row is what one transport achieved in a run.
type Row struct {
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
	KernelDrops int64   `json:"kernel_drops"` // the aggregator's kernel_rxq_ovfl counter
	Elapsed     float64 `json:"elapsed_s"`
	RecordsPerS float64 `json:"records_per_s"` // written / elapsed
	MBPerS      float64 `json:"mb_per_s"`
	Offered     float64 `json:"offered_ratio"` // unique / sent
	ProdCPUNs   float64 `json:"producer_cpu_ns_per_record"`
}

// Result is one run.
type Result struct {
	Rows          []Row   `json:"rows"`
	AggCPUNs      float64 `json:"aggregator_cpu_ns_per_record"`
	AggPeakRSSKiB int64   `json:"aggregator_peak_rss_kib"`
	Elapsed       float64 `json:"elapsed_s"`
	Output        string  `json:"output"`
	AggArgs       []string
}

var listenRe = regexp.MustCompile(`listening on (\S+)`)
var metricsRe = regexp.MustCompile(`metrics on (http://\S+)`)

// listenURL is the aggregator URL used for a transport in dir. TCP and UDP
// use port 0; the bound port is read back from the aggregator's stderr.
func listenURL(transport, dir string) (string, error) {
	switch transport {
	case "unixsock", "unix":
		return "unix://" + filepath.Join(dir, "log.sock"), nil
	case "unixgram":
		return "unixgram://" + filepath.Join(dir, "log.dgram.sock"), nil
	case "tcp":
		return "tcp://127.0.0.1:0", nil
	case "udp":
		return "udp://127.0.0.1:0", nil
	case "fifo":
		return "fifo://" + filepath.Join(dir, "log_fifo"), nil
	case "shm":
		return "shm://" + filepath.Join(dir, "log.shm.sock"), nil
	case "mq":
		return "mq:///logagg-" + strconv.Itoa(os.Getpid()) + "-" + filepath.Base(dir), nil
	}
	return "", fmt.Errorf("unknown transport %q", transport)
}

func schemeOf(u string) string {
	if i := strings.Index(u, "://"); i > 0 {
		return u[:i]
	}
	return u
}

// Run performs one run and returns its accounting.
func Run(ctx context.Context, s Spec) (*Result, error) {
	if s.Producers <= 0 {
		s.Producers = 1
	}
	if s.Format == "" {
		s.Format = "json"
	}
	if s.Output == "" {
		s.Output = filepath.Join(s.Dir, "aggregated_logs.jsonl")
	}
	if s.Duration <= 0 && s.Count <= 0 {
		s.Duration = 5 * time.Second
	}
	args := []string{"--output", s.Output, "--metrics", "127.0.0.1:0", "--fsync", "never", "--max-size", "0"}
	byScheme := map[string]string{}  // scheme -> transport name
	requested := map[string]string{} // transport name -> URL as configured (the metrics label)
	for _, t := range s.Transports {
		u, err := listenURL(t, s.Dir)
		if err != nil {
			return nil, err
		}
		args = append(args, "--listen", u)
		byScheme[schemeOf(u)] = t
		requested[t] = u
	}
	args = append(args, s.ExtraArgs...)

	agg := exec.CommandContext(ctx, s.AggregatorBin, args...)
	agg.Cancel = func() error { return agg.Process.Signal(syscall.SIGTERM) }
	agg.WaitDelay = 30 * time.Second
	stderrR, stderrW := io.Pipe()
	agg.Stderr = stderrW
	if err := agg.Start(); err != nil {
		return nil, fmt.Errorf("start aggregator: %w", err)
	}
	var aggLog bytes.Buffer
	var aggLogMu sync.Mutex
	ready := make(chan struct{})
	urls := map[string]string{}
	var metricsURL string
	go func() {
		sc := bufio.NewScanner(stderrR)
		seen := 0
		for sc.Scan() {
			line := sc.Text()
			aggLogMu.Lock()
			aggLog.WriteString(line + "\n")
			if m := listenRe.FindStringSubmatch(line); m != nil {
				urls[byScheme[schemeOf(m[1])]] = m[1]
			}
			if m := metricsRe.FindStringSubmatch(line); m != nil {
				metricsURL = m[1]
			}
			if strings.Contains(line, "aggregator: writing") && seen == 0 {
				seen++
				close(ready)
			}
			aggLogMu.Unlock()
			if s.Stderr != nil {
				fmt.Fprintln(s.Stderr, line)
			}
		}
	}()
	waitErr := make(chan error, 1)
	go func() { waitErr <- agg.Wait(); stderrW.Close() }()
	select {
	case <-ready:
	case err := <-waitErr:
		aggLogMu.Lock()
		defer aggLogMu.Unlock()
		return nil, fmt.Errorf("aggregator exited at start-up: %v\n%s", err, aggLog.String())
	case <-time.After(15 * time.Second):
		agg.Process.Kill()
		return nil, errors.New("aggregator did not start within 15s")
	}

	start := time.Now()
	type prodResult struct {
		transport string
		summary   summary
		cpu       time.Duration
		err       error
	}
	results := make(chan prodResult, len(s.Transports)*s.Producers)
	var wg sync.WaitGroup
	for _, t := range s.Transports {
		aggLogMu.Lock()
		u := urls[t]
		aggLogMu.Unlock()
		for i := 0; i < s.Producers; i++ {
			wg.Add(1)
			go func(t, u string, i int) {
				defer wg.Done()
				pargs := []string{t, strconv.Itoa(s.Size), "--addr", u, "--seq", "--id", fmt.Sprintf("%s-%d", t, i),
					"--rate", strconv.Itoa(s.Rate), "--buffer", strconv.Itoa(s.Buffer), "--format", s.Format, "--json-summary"}
				if s.Count > 0 {
					pargs = append(pargs, "--count", strconv.Itoa(s.Count))
				}
				if s.Duration > 0 {
					pargs = append(pargs, "--duration", s.Duration.String())
				}
				cmd := exec.CommandContext(ctx, s.ProducerBin, pargs...)
				var errBuf bytes.Buffer
				cmd.Stderr = &errBuf
				err := cmd.Run()
				r := prodResult{transport: t}
				if cmd.ProcessState != nil {
					r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
				}
				sum, perr := parseSummary(errBuf.Bytes())
				r.summary = sum
				if perr != nil {
					r.err = fmt.Errorf("producer %s-%d: %v (exit: %v)\n%s", t, i, perr, err, errBuf.String())
				}
				results <- r
			}(t, u, i)
		}
	}
	wg.Wait()
	close(results)

	rows := map[string]*Row{}
	for _, t := range s.Transports {
		rows[t] = &Row{Transport: t, Producers: s.Producers, Size: s.Size, Buffer: s.Buffer}
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

	// Read the kernel drop counters while the aggregator still serves them.
	aggLogMu.Lock()
	mu := metricsURL
	aggLogMu.Unlock()
	drops := map[string]int64{}
	if mu != "" {
		drops = scrapeDrops(mu)
	}

	agg.Process.Signal(syscall.SIGTERM)
	var aerr error
	select {
	case aerr = <-waitErr:
	case <-time.After(60 * time.Second):
		agg.Process.Kill()
		aerr = errors.New("aggregator did not exit within 60s of SIGTERM")
	}
	elapsed := time.Since(start)
	if aerr != nil {
		aggLogMu.Lock()
		defer aggLogMu.Unlock()
		return nil, fmt.Errorf("aggregator: %v\n%s", aerr, aggLog.String())
	}
	res := &Result{Elapsed: elapsed.Seconds(), Output: s.Output, AggArgs: args}
	if st := agg.ProcessState; st != nil {
		if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
			res.AggPeakRSSKiB = ru.Maxrss
		}
	}

	// Account for every stamped line.
	counts, err := scan(s.Output)
	if err != nil {
		return nil, err
	}
	var totalWritten int64
	for _, t := range s.Transports {
		row := rows[t]
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
		row.KernelDrops = drops[requested[t]]
		row.Elapsed = elapsed.Seconds()
		row.RecordsPerS = float64(row.Written) / elapsed.Seconds()
		row.MBPerS = row.RecordsPerS * float64(s.Size) / 1e6
		if row.Sent > 0 {
			row.Offered = float64(row.Unique) / float64(row.Sent)
			row.ProdCPUNs = float64(prodCPU[t].Nanoseconds()) / float64(row.Sent)
		}
		totalWritten += row.Written
		res.Rows = append(res.Rows, *row)
	}
	if st := agg.ProcessState; st != nil && totalWritten > 0 {
		res.AggCPUNs = float64((st.UserTime() + st.SystemTime()).Nanoseconds()) / float64(totalWritten)
	}
	return res, errors.Join(prodErrs...)
}

type summary struct {
	Sent   int64 `json:"sent"`
	Failed int64 `json:"failed"`
}

// parseSummary finds the producer's JSON summary line in its stderr.
func parseSummary(stderr []byte) (summary, error) {
	var s summary
	lines := bytes.Split(bytes.TrimSpace(stderr), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		l := bytes.TrimSpace(lines[i])
		if len(l) > 0 && l[0] == '{' {
			if err := json.Unmarshal(l, &s); err == nil {
				return s, nil
			}
		}
	}
	return s, errors.New("no JSON summary in producer output")
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
			if err == bufio.ErrBufferFull {
				for err == bufio.ErrBufferFull { // a line over 1 MiB: skip the rest of it
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

// scrapeDrops returns kernel overflow drops per listener URL.
func scrapeDrops(metricsURL string) map[string]int64 {
	out := map[string]int64{}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(metricsURL)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	re := regexp.MustCompile(`^logagg_dropped_total\{cause="kernel_rxq_ovfl",listener="([^"]+)"\} (\S+)`)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			out[m[1]] += int64(v)
		}
	}
	return out
}

// Table renders rows as an aligned text table.
func Table(w io.Writer, res *Result) {
	fmt.Fprintf(w, "%-9s %5s %6s %10s %10s %8s %5s %9s %12s %8s\n",
		"transport", "prods", "size", "sent", "written", "lost", "dup", "kdrops", "records/s", "MB/s")
	for _, r := range res.Rows {
		fmt.Fprintf(w, "%-9s %5d %6d %10d %10d %8d %5d %9d %12.0f %8.1f\n",
			r.Transport, r.Producers, r.Size, r.Sent, r.Written, r.Lost, r.Duplicated, r.KernelDrops, r.RecordsPerS, r.MBPerS)
	}
	fmt.Fprintf(w, "aggregator: %.0f ns CPU per record, peak RSS %d KiB, %.2fs elapsed; output %s\n",
		res.AggCPUNs, res.AggPeakRSSKiB, res.Elapsed, res.Output)
}
