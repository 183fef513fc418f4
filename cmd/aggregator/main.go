// Command aggregator collects log records from local processes over unix
// stream and datagram sockets, TCP, UDP and FIFOs (and more transports as
// they register) and writes them as JSON lines.
//
//	aggregator unixsock                      # seed-compatible: one transport, default address
//	aggregator all                           # the five seed transports at once
//	aggregator --listen unix:///run/app.sock --listen udp://127.0.0.1:5514 --metrics 127.0.0.1:9100
//	aggregator --config /etc/logagg.yaml
//
// main only parses flags, builds the configuration and runs the daemon; see
// internal/daemon for the wiring.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ipclab/logagg/internal/config"
	"github.com/ipclab/logagg/internal/daemon"
	_ "github.com/ipclab/logagg/internal/transport/all"
)

// seedTransports maps the seed's transport names to default listen URLs.
// TCP and UDP share port 9000 as in the seed (different protocols do not
// clash); the two unix sockets need distinct paths.
var seedTransports = map[string]string{
	"unixsock": "unix:///tmp/log.sock",
	"unix":     "unix:///tmp/log.sock",
	"unixgram": "unixgram:///tmp/log.dgram.sock",
	"tcp":      "tcp://127.0.0.1:9000",
	"udp":      "udp://127.0.0.1:9000",
	"fifo":     "fifo:///tmp/log_fifo",
	"shm":      "shm:///tmp/log.shm.sock",
	"mq":       "mq:///logagg",
}

var allSeed = []string{"unixsock", "tcp", "unixgram", "udp", "fifo"}

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}
func (f durationFlag) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*f.d = v
	return nil
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("aggregator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: aggregator [flags] [unixsock|tcp|unixgram|udp|fifo|shm|mq|all ...]\n\nflags:\n")
		fs.PrintDefaults()
	}
	// Flags write into a scratch config; only the flags the user set are
	// copied over the file's values, so a config file and flags combine.
	var fl config.Config = config.Default()
	var listen listFlag
	configPath := fs.String("config", "", "YAML configuration `file`; flags given explicitly override it")
	fs.Var(&listen, "listen", "listen `URL` (repeatable): unix:///path, unixgram:///path, tcp://host:port, udp://host:port, fifo:///path, ...")
	fs.StringVar(&fl.Output.Path, "output", fl.Output.Path, "output JSON-lines `file`")
	fs.Var(&fl.Output.MaxSize, "max-size", "rotate the output at this `size` (e.g. 128MiB; 0 = never)")
	fs.IntVar(&fl.Output.MaxFiles, "max-files", fl.Output.MaxFiles, "rotated segments to keep (0 = all)")
	fs.StringVar(&fl.Output.Fsync, "fsync", fl.Output.Fsync, "when to fsync: never, batch, or interval=DURATION")
	fs.StringVar(&fl.Metrics, "metrics", "", "serve Prometheus /metrics and /healthz on `host:port`")
	fs.Var(&fl.Limits.MaxRecord, "max-record", "truncate records longer than this `size` (flagged and counted)")
	fs.IntVar(&fl.Limits.MaxConns, "max-conns", fl.Limits.MaxConns, "refuse stream connections beyond this many per listener (0 = unlimited)")
	fs.Var(durationFlag{&fl.Limits.IdleTimeout}, "idle-timeout", "close stream connections idle this `long` (0 = never)")
	fs.StringVar(&fl.Sockets.Mode, "socket-mode", fl.Sockets.Mode, "octal `mode` of created socket files and FIFOs")
	fs.StringVar(&fl.Sockets.Group, "socket-group", "", "`group` (name or gid) of created socket files and FIFOs")
	fs.Var(&fl.Sockets.RcvBuf, "rcvbuf", "requested socket receive buffer / pipe `size` (the granted value is logged and exported)")
	fs.IntVar(&fl.Queue.Batches, "queue-batches", fl.Queue.Batches, "batches the queue between listeners and writer holds")
	fs.Var(&fl.Queue.BatchBytes, "batch-bytes", "`size` at which a listener hands a batch to the writer")
	fs.Var(durationFlag{&fl.DrainTimeout}, "drain-timeout", "bound on the shutdown drain (a second signal also ends it)")
	fs.StringVar(&fl.LogLevel, "log-level", fl.LogLevel, "debug, info, warn or error (logs go to stderr)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}

	cfg := config.Default()
	if *configPath != "" {
		c, err := config.Load(*configPath)
		if err != nil {
			fmt.Fprintln(stderr, "aggregator:", err)
			return 2
		}
		cfg = c
	}
	fs.Visit(func(f *flag.Flag) { applyFlag(&cfg, &fl, f.Name) })
	cfg.Listen = append(cfg.Listen, listen...)
	for _, name := range fs.Args() {
		if name == "all" {
			for _, n := range allSeed {
				cfg.Listen = append(cfg.Listen, seedTransports[n])
			}
			continue
		}
		u, ok := seedTransports[name]
		if !ok {
			fmt.Fprintf(stderr, "aggregator: unknown transport %q (want unixsock, tcp, unixgram, udp, fifo, shm, mq or all; or use --listen URL)\n", name)
			return 2
		}
		cfg.Listen = append(cfg.Listen, u)
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "aggregator: invalid configuration:\n%v\n", err)
		return 2
	}

	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	stop, stopNow := context.WithCancel(context.Background())
	hardStop, hardStopNow := context.WithCancel(context.Background())
	defer stopNow()
	defer hardStopNow()

	d, err := daemon.New(cfg, logger, hardStop)
	if err != nil {
		fmt.Fprintln(stderr, "aggregator:", err)
		return 1
	}
	// The one thing normal operation prints: where we listen.
	for _, u := range d.ListenURLs() {
		fmt.Fprintf(stderr, "aggregator: listening on %s\n", u)
	}
	if a := d.MetricsAddr(); a != "" {
		fmt.Fprintf(stderr, "aggregator: metrics on http://%s/metrics\n", a)
	}
	fmt.Fprintf(stderr, "aggregator: writing %s\n", cfg.Output.Path)

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		stopping := false
		for s := range sigs {
			switch {
			case s == syscall.SIGHUP:
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if err := d.Reopen(ctx); err != nil {
					logger.Error("reopen output", "err", err)
				}
				cancel()
			case !stopping:
				stopping = true
				stopNow()
				time.AfterFunc(cfg.DrainTimeout, hardStopNow)
			default:
				logger.Warn("second signal: ending the drain now")
				hardStopNow()
			}
		}
	}()

	if err := d.Run(stop, hardStop); err != nil {
		fmt.Fprintln(stderr, "aggregator:", err)
		return 1
	}
	return 0
}

// applyFlag copies one explicitly set flag from fl into cfg.
func applyFlag(cfg, fl *config.Config, name string) {
	switch name {
	case "output":
		cfg.Output.Path = fl.Output.Path
	case "max-size":
		cfg.Output.MaxSize = fl.Output.MaxSize
	case "max-files":
		cfg.Output.MaxFiles = fl.Output.MaxFiles
	case "fsync":
		cfg.Output.Fsync = fl.Output.Fsync
	case "metrics":
		cfg.Metrics = fl.Metrics
	case "max-record":
		cfg.Limits.MaxRecord = fl.Limits.MaxRecord
	case "max-conns":
		cfg.Limits.MaxConns = fl.Limits.MaxConns
	case "idle-timeout":
		cfg.Limits.IdleTimeout = fl.Limits.IdleTimeout
	case "socket-mode":
		cfg.Sockets.Mode = fl.Sockets.Mode
	case "socket-group":
		cfg.Sockets.Group = fl.Sockets.Group
	case "rcvbuf":
		cfg.Sockets.RcvBuf = fl.Sockets.RcvBuf
	case "queue-batches":
		cfg.Queue.Batches = fl.Queue.Batches
	case "batch-bytes":
		cfg.Queue.BatchBytes = fl.Queue.BatchBytes
	case "drain-timeout":
		cfg.DrainTimeout = fl.DrainTimeout
	case "log-level":
		cfg.LogLevel = fl.LogLevel
	}
}
