// Command aggregator collects log records from local processes over unix
// stream and datagram sockets, TCP, UDP and FIFOs (and more transports as
// they register) and writes them as JSON lines.
//
//	aggregator unixsock                      # seed-compatible: one transport, default address
//	aggregator all                           # the five seed transports at once
//	aggregator --listen unix:///run/app.sock --listen udp://127.0.0.1:5514 --metrics 127.0.0.1:9100
//	aggregator --config /etc/logagg.yaml
//	aggregator check-config /etc/logagg/logagg.yaml
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
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ipclab/logagg/internal/config"
	"github.com/ipclab/logagg/internal/daemon"
	"github.com/ipclab/logagg/internal/forward/kafka"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/systemd"
	"github.com/ipclab/logagg/internal/transport"
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
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "run": // aggregator run [flags] -- CMD ARGS...
			os.Exit(runCommand(os.Args[2:], os.Stderr))
		case "forward": // aggregator forward --from PATH ...
			os.Exit(forwardCommand(os.Args[2:], os.Stderr))
		case "check-config": // aggregator check-config FILE
			os.Exit(checkConfigCommand(os.Args[2:], os.Stdout, os.Stderr))
		}
	}
	os.Exit(run(os.Args[1:], os.Stderr))
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil || *f.d == 0 {
		return "" // so -help shows no "(default 0s)"
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
		fmt.Fprintf(stderr, "usage: aggregator [flags] [unixsock|tcp|unixgram|udp|fifo|shm|mq|all ...]\n"+
			"       aggregator run [flags] -- CMD ARGS...   capture CMD's stdout/stderr\n"+
			"       aggregator forward --from PATH ...      ship an existing log to Kafka\n"+
			"       aggregator check-config FILE            validate a configuration file (exit 0 valid, 1 not)\n\nflags:\n")
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
	fs.BoolVar(&fl.Output.DirectIO, "direct-io", fl.Output.DirectIO, "write whole blocks of the output with O_DIRECT, bypassing the page cache (falls back to buffered where refused; =false to turn off)")
	fs.StringVar(&fl.Metrics, "metrics", "", "serve Prometheus /metrics and /healthz on `host:port` (an empty host is 127.0.0.1)")
	fs.BoolVar(&fl.Pprof, "pprof", false, "also serve Go's profiler (/debug/pprof/) on the metrics endpoint; unauthenticated, so off by default")
	fs.Var(&fl.Limits.MaxRecord, "max-record", "truncate records longer than this `size` (flagged and counted)")
	fs.IntVar(&fl.Limits.MaxConns, "max-conns", fl.Limits.MaxConns, "accept at most this many stream connections per listener at once; more wait in the listen backlog (0 = unlimited)")
	fs.Var(&fl.Limits.MaxPartial, "max-partial", "bound on the bytes all stream connections hold in incomplete records; past it the largest are written out, flagged truncated")
	fs.IntVar(&fl.Limits.EventLoops, "event-loops", fl.Limits.EventLoops, "event loops serving connections (0 = one per CPU)")
	fs.Var(durationFlag{&fl.Limits.IdleTimeout}, "idle-timeout", "close stream connections idle this `long` (default: never)")
	fs.Var(durationFlag{&fl.Limits.ReadCoalesce}, "read-coalesce", "pause this `long` after a short read on unix stream connections and UDP sockets, so writes collect instead of each waking us (0 = off)")
	fs.StringVar(&fl.Sockets.Mode, "socket-mode", fl.Sockets.Mode, "octal `mode` of created socket files and FIFOs")
	fs.StringVar(&fl.Sockets.Group, "socket-group", "", "`group` (name or gid) of created socket files and FIFOs")
	fs.Var(&fl.Sockets.RcvBuf, "rcvbuf", "requested receive buffer `size` of unix sockets, UDP sockets and FIFOs (the granted value is logged and exported)")
	fs.Var(&fl.Sockets.TCPRcvBuf, "tcp-rcvbuf", "fixed receive buffer `size` of TCP connections (0 = the kernel's autotuning, which a fixed size turns off)")
	fs.IntVar(&fl.Queue.Batches, "queue-batches", fl.Queue.Batches, "batches the queue between listeners and writer holds")
	fs.Var(&fl.Queue.BatchBytes, "batch-bytes", "`size` at which a listener hands a batch to the writer")
	fs.Var(durationFlag{&fl.DrainTimeout}, "drain-timeout", "bound on the shutdown drain (a second signal also ends it)")
	fs.StringVar(&fl.LogLevel, "log-level", fl.LogLevel, "debug, info, warn or error (logs go to stderr)")
	fs.Var(&fl.Output.MaxDisk, "max-disk", "cap on the bytes of all output segments (0 = none); see docs/kafka.md for the policy")
	kf := &kafka.Config{Topic: "logagg"}
	var kafkaBrokers string
	fs.StringVar(&kafkaBrokers, "forward-kafka", "", "forward every written record to these Kafka `brokers` (host:port,...)")
	fs.StringVar(&kf.Topic, "kafka-topic", kf.Topic, "Kafka `topic`")
	fs.StringVar(&kf.Key, "kafka-key", "host", "record key: host, source, producer or none")
	fs.StringVar(&kf.Compression, "kafka-compression", "lz4", "none, gzip, snappy, lz4 or zstd")
	fs.Var(durationFlag{&kf.Linger}, "kafka-linger", "how long a produce batch waits to fill, a `duration` (0 = 5ms)")
	fs.Var((*int32Flag)(&kf.BatchMaxBytes), "kafka-batch-bytes", "maximum `bytes` of one produce batch (0 = 1 MiB)")
	fs.BoolVar(&kf.TLS.Enable, "kafka-tls", false, "connect to the brokers with TLS")
	fs.StringVar(&kf.TLS.CAFile, "kafka-tls-ca", "", "CA certificate `file` for the brokers")
	fs.StringVar(&kf.TLS.CertFile, "kafka-tls-cert", "", "client certificate `file`")
	fs.StringVar(&kf.TLS.KeyFile, "kafka-tls-key", "", "client key `file`")
	fs.BoolVar(&kf.TLS.InsecureSkipVerify, "kafka-tls-insecure", false, "do not verify the brokers' certificates")
	fs.StringVar(&kf.SASL.Mechanism, "kafka-sasl-mechanism", "", "plain, scram-sha-256 or scram-sha-512")
	fs.StringVar(&kf.SASL.User, "kafka-sasl-user", "", "SASL user")
	fs.StringVar(&kf.SASL.Password, "kafka-sasl-password", os.Getenv("LOGAGG_KAFKA_SASL_PASSWORD"), "SASL password (default $LOGAGG_KAFKA_SASL_PASSWORD, which keeps it out of ps)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}

	// load builds the configuration: the file (read again at every
	// reload), then the flags given explicitly, then --listen and the
	// transport names. It is validated by its callers.
	load := func() (config.Config, error) {
		cfg := config.Default()
		if *configPath != "" {
			c, err := config.Load(*configPath)
			if err != nil {
				return cfg, err
			}
			cfg = c
		}
		fs.Visit(func(f *flag.Flag) {
			applyFlag(&cfg, &fl, f.Name)
			if strings.HasPrefix(f.Name, "kafka-") || f.Name == "forward-kafka" {
				applyKafkaFlag(&cfg, kf, kafkaBrokers, f.Name)
			}
		})
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
				return cfg, fmt.Errorf("unknown transport %q (want unixsock, tcp, unixgram, udp, fifo, shm, mq or all; or use --listen URL)", name)
			}
			cfg.Listen = append(cfg.Listen, u)
		}
		return cfg, nil
	}
	cfg, err := load()
	if err != nil {
		fmt.Fprintln(stderr, "aggregator:", err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "aggregator: invalid configuration:\n%v\n", err)
		return 2
	}

	logger := newLogger(stderr, cfg.LogLevel)

	stop, stopNow := context.WithCancel(context.Background())
	hardStop, hardStopNow := context.WithCancel(context.Background())
	defer stopNow()
	defer hardStopNow()

	inherited, err := inheritedSockets()
	if err != nil {
		fmt.Fprintln(stderr, "aggregator:", err)
		return 1
	}
	d, err := daemon.New(cfg, logger, hardStop, daemon.WithInherited(inherited))
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

	// Every listener is bound and the output open: systemd may start the
	// units ordered after us.
	ntf := newNotifier(logger)
	defer ntf.close()
	notifyCtx, stopNotify := context.WithCancel(context.Background())
	defer stopNotify()
	ntf.ready(notifyCtx, d)

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		stopping := false
		for s := range sigs {
			switch {
			case s == syscall.SIGHUP:
				ntf.reloading()
				reload(d, load, logger, stderr)
				ntf.reloaded()
			case !stopping:
				stopping = true
				ntf.stopping()
				stopNow()
				time.AfterFunc(cfg.DrainTimeout, hardStopNow)
			default:
				logger.Warn("second signal: ending the drain now")
				hardStopNow()
			}
		}
	}()

	code := 0
	if err := d.Run(stop, hardStop); err != nil {
		fmt.Fprintln(stderr, "aggregator:", err)
		code = 1
	}
	if reportLost(stderr, d.Lost()) {
		code = 1
	}
	return code
}

// reportLost prints what was accepted and never written, by cause, and
// reports whether there was any: an exit that lost records must not look
// like a clean one.
func reportLost(w io.Writer, lost map[string]pipeline.Loss) bool {
	var total pipeline.Loss
	causes := make([]string, 0, len(lost))
	for c, l := range lost {
		total.Add(l)
		causes = append(causes, c)
	}
	if total.Records == 0 {
		return false
	}
	sort.Strings(causes)
	parts := make([]string, 0, len(causes))
	for _, c := range causes {
		parts = append(parts, fmt.Sprintf("%s %d records (%d bytes)", c, lost[c].Records, lost[c].Bytes))
	}
	fmt.Fprintf(w, "aggregator: %d records (%d bytes) accepted but not written: %s\n",
		total.Records, total.Bytes, strings.Join(parts, ", "))
	return true
}

// reload is SIGHUP: read the configuration again and apply it
// (daemon.Reload). A configuration that is invalid or cannot be applied
// is refused and logged, the running one kept; the output is reopened in
// every case, so logrotate's SIGHUP works whatever the file says.
func reload(d *daemon.Daemon, load func() (config.Config, error), logger *slog.Logger, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	before := map[string]bool{}
	for _, u := range d.ListenURLs() {
		before[u] = true
	}
	cfg, err := load()
	if err == nil {
		err = d.Reload(ctx, cfg)
	}
	if err == nil {
		for _, u := range d.ListenURLs() {
			if !before[u] {
				fmt.Fprintf(stderr, "aggregator: listening on %s\n", u)
			}
		}
		return
	}
	logger.Error("reload refused; the running configuration is kept", "err", err)
	if errors.Is(err, daemon.ErrStopping) {
		return
	}
	if err := d.Reopen(ctx); err != nil {
		logger.Error("reopen output", "err", err)
	}
}

// inheritedSockets collects the sockets systemd (or systemd-socket-activate)
// passed, if any; the daemon matches them to listeners.
func inheritedSockets() (*transport.Inherited, error) {
	files, err := systemd.ListenFiles()
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	if len(files) == 0 {
		return nil, nil
	}
	in := transport.NewInherited()
	for i, f := range files {
		if err := in.Add(f.File, f.FD, f.Name); err != nil {
			in.Close()
			for _, rest := range files[i:] {
				rest.Close()
			}
			return nil, fmt.Errorf("socket activation: %w", err)
		}
	}
	return in, nil
}

// newLogger is the text logger on stderr at the validated level.
func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level)) // validated by config.Validate
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
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
	case "direct-io":
		cfg.Output.DirectIO = fl.Output.DirectIO
	case "metrics":
		cfg.Metrics = fl.Metrics
	case "pprof":
		cfg.Pprof = fl.Pprof
	case "max-record":
		cfg.Limits.MaxRecord = fl.Limits.MaxRecord
	case "max-conns":
		cfg.Limits.MaxConns = fl.Limits.MaxConns
	case "idle-timeout":
		cfg.Limits.IdleTimeout = fl.Limits.IdleTimeout
	case "read-coalesce":
		cfg.Limits.ReadCoalesce = fl.Limits.ReadCoalesce
	case "max-partial":
		cfg.Limits.MaxPartial = fl.Limits.MaxPartial
	case "event-loops":
		cfg.Limits.EventLoops = fl.Limits.EventLoops
	case "socket-mode":
		cfg.Sockets.Mode = fl.Sockets.Mode
	case "socket-group":
		cfg.Sockets.Group = fl.Sockets.Group
	case "rcvbuf":
		cfg.Sockets.RcvBuf = fl.Sockets.RcvBuf
	case "tcp-rcvbuf":
		cfg.Sockets.TCPRcvBuf = fl.Sockets.TCPRcvBuf
	case "queue-batches":
		cfg.Queue.Batches = fl.Queue.Batches
	case "batch-bytes":
		cfg.Queue.BatchBytes = fl.Queue.BatchBytes
	case "drain-timeout":
		cfg.DrainTimeout = fl.DrainTimeout
	case "log-level":
		cfg.LogLevel = fl.LogLevel
	case "max-disk":
		cfg.Output.MaxDisk = fl.Output.MaxDisk
	}
}

// applyKafkaFlag copies one explicitly set Kafka flag; any of them turns
// forwarding on (a config file may give the brokers).
func applyKafkaFlag(cfg *config.Config, kf *kafka.Config, brokers, name string) {
	if cfg.Forward.Kafka == nil {
		cfg.Forward.Kafka = &kafka.Config{Topic: kf.Topic}
	}
	k := cfg.Forward.Kafka
	switch name {
	case "forward-kafka":
		k.Brokers = strings.Split(brokers, ",")
	case "kafka-topic":
		k.Topic = kf.Topic
	case "kafka-key":
		k.Key = kf.Key
	case "kafka-compression":
		k.Compression = kf.Compression
	case "kafka-linger":
		k.Linger = kf.Linger
	case "kafka-batch-bytes":
		k.BatchMaxBytes = kf.BatchMaxBytes
	case "kafka-tls":
		k.TLS.Enable = kf.TLS.Enable
	case "kafka-tls-ca":
		k.TLS.CAFile = kf.TLS.CAFile
	case "kafka-tls-cert":
		k.TLS.CertFile = kf.TLS.CertFile
	case "kafka-tls-key":
		k.TLS.KeyFile = kf.TLS.KeyFile
	case "kafka-tls-insecure":
		k.TLS.InsecureSkipVerify = kf.TLS.InsecureSkipVerify
	case "kafka-sasl-mechanism":
		k.SASL.Mechanism = kf.SASL.Mechanism
	case "kafka-sasl-user":
		k.SASL.User = kf.SASL.User
	case "kafka-sasl-password":
		k.SASL.Password = kf.SASL.Password
	}
	if k.SASL.Password == "" {
		k.SASL.Password = kf.SASL.Password // from the environment
	}
}

type int32Flag int32

func (f *int32Flag) String() string {
	if f == nil || *f == 0 {
		return ""
	}
	return strconv.Itoa(int(*f))
}
func (f *int32Flag) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 32)
	*f = int32Flag(v)
	return err
}
