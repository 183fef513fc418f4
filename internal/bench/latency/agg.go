package latency

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/client"
	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/harness"
	"github.com/ipclab/logagg/internal/seqstamp"
)

// startAggregator starts the aggregator listening for transport t with
// its files in dir, writing output, and returns once it is ready, with
// the URL it bound.
func startAggregator(ctx context.Context, o *Options, t, dir, output string) (*harness.Proc, string, error) {
	if !slices.Contains(AggregatorTransports, t) {
		return nil, "", fmt.Errorf("%w: aggregator mode does not know transport %q", ErrBadOptions, t)
	}
	u, err := harness.ListenURL(t, dir)
	if err != nil {
		return nil, "", err
	}
	p, err := harness.Aggregator{Bin: o.AggregatorBin, Stderr: o.Stderr, StopTimeout: 15 * time.Second,
		Args: []string{"--listen", u, "--output", output, "--fsync", "never", "--max-size", "0"}}.Start(ctx)
	if err != nil {
		return nil, "", err
	}
	return p, p.Bound(u), nil
}

// tailer follows a growing file with inotify and calls line for every
// complete line with the time it was read.
type tailer struct {
	path string
	line func(b []byte, now int64)
}

// run tails until stop returns true while the file is at its end.
func (t *tailer) run(stop func() bool) error {
	// Locked for the same reason as the sender: a wake-up of this thread
	// is part of the figure, so it should not migrate between goroutines.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The aggregator may create the file a moment after it says it is ready.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, err := os.Stat(t.path); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, t.path, unix.IN_MODIFY); err != nil {
		return fmt.Errorf("inotify watch %s: %w", t.path, err)
	}
	fd, err := unix.Open(t.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	buf := make([]byte, 1<<20)
	events := make([]byte, 4096)
	var carry []byte
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("read output: %w", err)
		}
		if n > 0 {
			now := nanotime()
			data := buf[:n]
			if len(carry) > 0 {
				data = append(carry, data...)
				carry = carry[:0]
			}
			for {
				i := bytes.IndexByte(data, '\n')
				if i < 0 {
					carry = append(carry[:0], data...)
					break
				}
				t.line(data[:i], now)
				data = data[i+1:]
			}
			continue
		}
		if stop() {
			return nil
		}
		// At the end: drain queued events, then block until the next
		// write (or 50 ms, to look at stop again). The watch was added
		// before the first read, so no write can slip between the two.
		for {
			if _, err := unix.Read(in, events); err != nil {
				break
			}
		}
		if _, err := unix.Poll([]unix.PollFd{{Fd: int32(in), Events: unix.POLLIN}}, 50); err != nil && err != unix.EINTR {
			return err
		}
	}
}

// measureAggregator runs one aggregator-mode row.
func measureAggregator(ctx context.Context, o *Options, t string, size int, dir string) (Row, error) {
	output := filepath.Join(dir, "lat-"+t+".jsonl")
	os.Remove(output)
	agg, url, err := startAggregator(ctx, o, t, dir, output)
	if err != nil {
		return Row{}, err
	}
	stopped := false
	defer func() {
		if !stopped {
			agg.Stop()
		}
	}()
	// A producer ID per row and process: lines from other rows or runs
	// can never be mistaken for ours.
	id := "lat-" + strconv.Itoa(os.Getpid()) + "-" + t
	copts := []client.Option{client.WithSeq(id), client.WithFormat(client.FormatJSON), client.WithContext(ctx)}
	ack := o.Ack && harness.Acknowledged(t)
	if ack {
		copts = append(copts, client.WithAck(0))
	}
	w, err := client.Dial(url, copts...)
	if err != nil {
		return Row{}, fmt.Errorf("dial %s: %w", url, err)
	}
	defer w.Close()
	pad := size - w.EncodedLen("INFO", "")
	if pad < 1 {
		pad = 1
	}
	msg := strings.Repeat("x", pad)

	warm, meas := o.counts()
	total := warm + meas
	sent := make([]atomic.Int64, total) // scheduled send time by seq-1; 0 = not sent
	var abort atomic.Bool
	snd := &sender{total: total, warm: warm, interval: o.interval(), pacing: o.Pacing, cpu: -1, abort: &abort}
	rec := newRecorder()
	tailCPUs := cpuTally{}
	var (
		seen      = make([]bool, total)
		nSeen     int
		dups      int
		firstSent int64 = 1<<63 - 1
		lastSeen  int64
	)
	tl := &tailer{path: output, line: func(b []byte, now int64) {
		st, ok := seqstamp.Find(b)
		if !ok || st.Producer != id || st.Seq < 1 || st.Seq > uint64(total) {
			return
		}
		i := int(st.Seq - 1)
		if seen[i] {
			dups++
			return
		}
		seen[i] = true
		nSeen++
		if i < warm {
			return
		}
		t0 := sent[i].Load()
		rec.record(now - t0)
		firstSent = min(firstSent, t0)
		lastSeen = now
		if nSeen%cpuSample == 0 {
			tailCPUs.add(bench.GetCPU())
		}
		if nSeen%1024 == 0 {
			o.Progress.Add(1024)
		}
	}}
	grace := int64(10 * time.Second)
	if t == "udp" || t == "unixgram" {
		grace = int64(2 * time.Second)
	}
	var doneAt atomic.Int64
	tailStop := func() bool {
		if nSeen >= total || abort.Load() {
			return true
		}
		if !snd.done.Load() {
			return false
		}
		doneAt.CompareAndSwap(0, nanotime())
		return nanotime()-doneAt.Load() > grace
	}
	var wg sync.WaitGroup
	var tailErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		if tailErr = tl.run(tailStop); tailErr != nil {
			abort.Store(true)
		}
	}()
	go func() {
		defer wg.Done()
		snd.run(func(i int, due, _ int64) error {
			sent[i].Store(due)
			return w.WriteRecord(time.Now(), "INFO", msg)
		})
	}()
	wg.Wait()
	if tailErr != nil {
		return Row{}, tailErr
	}
	if snd.err != nil {
		return Row{}, snd.err
	}
	if err := w.Close(); err != nil && !errors.Is(err, client.ErrClosed) {
		return Row{}, fmt.Errorf("close client: %w", err)
	}
	stopped = true
	if _, err := agg.Stop(); err != nil {
		return Row{}, err
	}
	row := Row{Warmup: warm, Sent: meas, Measured: rec.count(), OneWay: rec.dist()}
	snd.fill(&row, -1)
	row.Receiver = tailCPUs.side(-1)
	row.Lost = meas - int(row.Measured)
	if row.Measured > 0 {
		row.ElapsedNs = lastSeen - firstSent
	}
	row.Notes = append(row.Notes, "one-way = scheduled send time of the client write -> line read by an inotify tailer of the output file (--fsync never); includes the tailer's wake-up")
	if ack {
		row.Notes = append(row.Notes, "acknowledged mode (client.WithAck)")
	}
	if dups > 0 {
		row.Notes = append(row.Notes, fmt.Sprintf("%d duplicate records", dups))
	}
	return row, nil
}
