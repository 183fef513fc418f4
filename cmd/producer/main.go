// Command producer sends log records to the aggregator, like the seed's
// producer but measurable: it paces without drift, stamps sequence numbers,
// buffers like setvbuf, reconnects, and prints one summary line.
//
//	producer [flags] <transport> <message-size>
//
// transport is unixsock (or unix), unixgram, tcp, udp, fifo, shm or mq,
// each mapped to the aggregator's default address unless --addr is given.
// Defaults reproduce the seed: 10 records/s for 5 s, JSON records of about
// message-size bytes. Flags may come before or after the positional
// arguments.
//
// Exit status: 0 when every record was delivered, 1 when any failed or the
// aggregator could not be reached, 2 for bad usage.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ipclab/logagg/client"
)

var defaultAddr = map[string]string{
	"unixsock": "unix:///tmp/log.sock",
	"unix":     "unix:///tmp/log.sock",
	"unixgram": "unixgram:///tmp/log.dgram.sock",
	"tcp":      "tcp://127.0.0.1:9000",
	"udp":      "udp://127.0.0.1:9000", // TCP and UDP share port 9000, as in the seed
	"fifo":     "fifo:///tmp/log_fifo",
	"shm":      "shm:///tmp/log.shm.sock",
	"mq":       "mq:///logagg",
}

type options struct {
	transport  string
	size       int
	addr       string
	rate       float64
	tick       time.Duration
	count      int
	duration   time.Duration
	buffer     int
	format     string
	seq        bool
	id         string
	source     string
	jsonSum    bool
	reconnect  bool
	ack        bool
	aggUsers   string // --aggregator-user
	durationOK bool   // --duration given explicitly
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// parse accepts flags before and after the positional arguments.
func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("producer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "", "listener URL (overrides the transport's default address)")
	fs.Float64Var(&o.rate, "rate", 10, "records per second (0 = as fast as possible)")
	fs.DurationVar(&o.tick, "tick", 0, "with --rate: wake once per tick and send the records due by then together (0 = wake for each record); a cheap load at a high rate")
	fs.IntVar(&o.count, "count", 0, "stop after N records (0 = no limit)")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "stop after this long (default 5s unless --count is given)")
	fs.IntVar(&o.buffer, "buffer", 0, "user-space write buffer in bytes (0 = one write per record)")
	fs.StringVar(&o.format, "format", "json", "record format: json, raw, rfc3164, rfc5424")
	fs.BoolVar(&o.seq, "seq", false, "stamp records with producer id, seq and sent_ns")
	fs.StringVar(&o.id, "id", "", "producer id for --seq (default <hostname>-<pid>)")
	fs.StringVar(&o.source, "source", "", "source name in records (default producer-<pid>)")
	fs.BoolVar(&o.jsonSum, "json-summary", false, "print the summary as one JSON object")
	fs.BoolVar(&o.reconnect, "reconnect", true, "redial stream transports and shm when the aggregator goes away")
	fs.StringVar(&o.aggUsers, "aggregator-user", "", "comma-separated users (names or uids) the aggregator may run as, besides root, this user and logagg: a socket, FIFO or queue of anyone else is refused")
	fs.BoolVar(&o.ack, "ack", false, "unixsock, tcp: have the aggregator acknowledge records once written, resend what it did not acknowledge after a reconnect, and report as delivered only what it acknowledged")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: producer [flags] <unixsock|unixgram|tcp|udp|fifo|shm|mq> <message-size>")
		fs.PrintDefaults()
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return o, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "duration" {
			o.durationOK = true
		}
	})
	if o.count > 0 && !o.durationOK {
		o.duration = 0
	}
	if err := o.positional(pos); err != nil {
		return o, err
	}
	if o.rate < 0 || o.count < 0 || o.duration < 0 || o.buffer < 0 || o.tick < 0 {
		return o, errors.New("--rate, --count, --duration, --buffer and --tick must not be negative")
	}
	return o, nil
}

// positional reads <transport> <message-size> (defaults: unixsock, 100) and
// the transport's default address unless --addr gave one.
func (o *options) positional(pos []string) error {
	o.transport, o.size = "unixsock", 100
	if len(pos) > 2 {
		return fmt.Errorf("too many arguments: %q", pos)
	}
	if len(pos) >= 1 {
		o.transport = pos[0]
	}
	if len(pos) == 2 {
		n, err := strconv.Atoi(pos[1])
		if err != nil || n < 1 {
			return fmt.Errorf("message-size %q: want a positive number of bytes", pos[1])
		}
		o.size = n
	}
	if o.addr == "" {
		a, ok := defaultAddr[o.transport]
		if !ok {
			return fmt.Errorf("unknown transport %q (want unixsock, unixgram, tcp, udp, fifo, shm or mq, or use --addr)", o.transport)
		}
		o.addr = a
	}
	return nil
}

type summary struct {
	URL        string  `json:"url"`
	ProducerID string  `json:"producer_id,omitempty"`
	Sent       uint64  `json:"sent"`
	Delivered  uint64  `json:"delivered"`
	Failed     uint64  `json:"failed"`
	ElapsedS   float64 `json:"elapsed_s"`
	Rate       float64 `json:"rate"`
	Bytes      uint64  `json:"bytes"`
	Reconnects uint64  `json:"reconnects"`
	Writes     uint64  `json:"writes"`
	Error      string  `json:"error,omitempty"`
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "producer: %v\n", err)
		return 2
	}
	copts, err := clientOptions(ctx, &o)
	if err != nil {
		fmt.Fprintf(stderr, "producer: %v\n", err)
		return 2
	}
	start := time.Now()
	sum := summary{URL: o.addr, ProducerID: o.id}
	w, err := client.Dial(o.addr, copts...)
	if err != nil {
		var de *client.DialError
		cause := err
		if errors.As(err, &de) {
			cause = de.Err
		}
		sum.Error = fmt.Sprintf("could not deliver to %s: %v", o.addr, cause)
		report(stderr, o, sum, time.Since(start))
		return 1
	}
	finished := watchBlocked(ctx, w, o, sum, start, stderr)
	loopErr := sendLoop(ctx, w, o, padMessage(w, o.size))
	closeErr := w.Close() // flushes: may block like a send
	finished()
	sum.count(w)
	if loopErr == nil {
		loopErr = closeErr
	}
	if loopErr != nil || sum.Failed > 0 {
		if loopErr == nil {
			loopErr = fmt.Errorf("%d records failed", sum.Failed)
		}
		sum.Error = fmt.Sprintf("could not deliver to %s: %v", o.addr, loopErr)
	}
	report(stderr, o, sum, time.Since(start))
	if sum.Error != "" {
		return 1
	}
	return 0
}

// clientOptions are the client's options for o; it fills o's defaults
// (source, producer id).
func clientOptions(ctx context.Context, o *options) ([]client.Option, error) {
	format, err := client.ParseFormat(o.format)
	if err != nil {
		return nil, err
	}
	pid := os.Getpid()
	if o.source == "" {
		o.source = "producer-" + strconv.Itoa(pid)
	}
	copts := []client.Option{
		client.WithContext(ctx),
		client.WithFormat(format),
		client.WithBuffer(o.buffer),
		client.WithSource(o.source),
	}
	if o.seq {
		if o.id == "" {
			host, _ := os.Hostname()
			if host == "" {
				host = "p"
			}
			o.id = host + "-" + strconv.Itoa(pid)
		}
		copts = append(copts, client.WithSeq(o.id))
	}
	if o.ack {
		copts = append(copts, client.WithAck(0))
	}
	if o.aggUsers != "" {
		uids, err := client.ParseUsers(o.aggUsers)
		if err != nil {
			return nil, err
		}
		copts = append(copts, client.WithAggregatorUID(uids...))
	}
	if o.reconnect {
		// The client applies reconnecting to stream transports and shm
		// (which also waits at Close until the aggregator released every
		// frame, and offers a new aggregator what a dead one did not).
		copts = append(copts, client.WithReconnect(50*time.Millisecond, 2*time.Second))
	}
	return copts, nil
}

// count copies the writer's counters into s.
func (s *summary) count(w *client.Writer) {
	s.Sent, s.Failed, s.Bytes = w.Sent(), w.Failed(), w.BytesSent()
	s.Delivered = w.Delivered()
	s.Reconnects, s.Writes = w.Reconnects(), w.Writes()
}

// watchBlocked ends a producer still blocked in a send blockedSendGrace
// after ctx ended, with its summary, instead of letting it hang: a send can
// block for ever when nobody reads (a full POSIX queue or shm ring whose
// aggregator is gone, a FIFO nobody drains). The records counted as sent
// are the ones the kernel took. The returned finished is called once the
// sends are over; after it the watchdog does nothing.
func watchBlocked(ctx context.Context, w *client.Writer, o options, sum summary, start time.Time, stderr io.Writer) (finished func()) {
	var (
		mu   sync.Mutex
		done bool
	)
	stop := context.AfterFunc(ctx, func() {
		time.Sleep(blockedSendGrace)
		mu.Lock() // held until exit: main cannot report twice
		if done {
			mu.Unlock()
			return
		}
		sum.count(w)
		sum.Error = fmt.Sprintf("could not deliver to %s: still blocked in a send %v after the signal (nobody is reading)", o.addr, blockedSendGrace)
		report(stderr, o, sum, time.Since(start))
		os.Exit(1)
	})
	return func() {
		stop()
		mu.Lock()
		done = true
		mu.Unlock()
	}
}

// blockedSendGrace is how long a send may stay blocked after SIGINT/SIGTERM.
const blockedSendGrace = 3 * time.Second

// padMessage returns a message that makes the whole encoded record about
// size bytes (never less than the fixed part).
func padMessage(w *client.Writer, size int) string {
	base := "log message "
	over := w.EncodedLen("INFO", base)
	if pad := size - over; pad > 0 {
		return base + strings.Repeat("x", pad)
	}
	return base
}

// sendLoop sends until count, duration or ctx ends it, or the first error.
// Pacing uses absolute deadlines (next += interval), so a slow write does
// not shift every later record.
func sendLoop(ctx context.Context, w *client.Writer, o options, msg string) error {
	var interval time.Duration
	if o.rate > 0 {
		interval = time.Duration(float64(time.Second) / o.rate)
	}
	start := time.Now()
	var end time.Time
	if o.duration > 0 {
		end = start.Add(o.duration)
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	next := start
	clock := wallClock{anchor: start}
	for i := 0; o.count == 0 || i < o.count; i++ {
		if ctx.Err() != nil {
			return nil
		}
		if interval > 0 && i > 0 {
			next = next.Add(interval)
			if !end.IsZero() && !next.Before(end) {
				return nil
			}
			// A record due within a tick is sent now: with --tick the
			// sender wakes once per tick, not once per record (at 50k/s
			// a timer every 20 µs costs the sender a fifth of a CPU).
			if d := time.Until(next); d > o.tick {
				timer.Reset(d)
				select {
				case <-ctx.Done():
					return nil
				case <-timer.C:
				}
			}
		} else if !end.IsZero() {
			// Flat out: one clock read per record (wallClock) serves the
			// end check and the record's timestamp; a clock read is ~30 ns
			// here, a sizeable share of a shm record's cost.
			now := clock.now()
			if !now.Before(end) {
				return nil
			}
			if err := w.WriteRecord(now, "INFO", msg); err != nil {
				return err
			}
			continue
		}
		if err := w.Log("INFO", msg); err != nil {
			return err
		}
	}
	return nil
}

func report(stderr io.Writer, o options, s summary, elapsed time.Duration) {
	s.ElapsedS = elapsed.Seconds()
	if s.ElapsedS > 0 {
		s.Rate = float64(s.Sent) / s.ElapsedS
	}
	if o.jsonSum {
		b, _ := json.Marshal(s)
		fmt.Fprintln(stderr, string(b))
		return
	}
	if s.Error != "" {
		fmt.Fprintf(stderr, "producer: %s\n", s.Error)
	}
	delivered := ""
	if s.Delivered != s.Sent {
		delivered = fmt.Sprintf(" delivered=%d", s.Delivered)
	}
	fmt.Fprintf(stderr, "producer: sent=%d failed=%d elapsed=%.2fs rate=%.0f/s bytes=%d reconnects=%d%s\n",
		s.Sent, s.Failed, s.ElapsedS, s.Rate, s.Bytes, s.Reconnects, delivered)
}
