package main

// aggregator forward: the Kafka forwarder on its own, shipping a log that
// some aggregator wrote (now or earlier) without running any listener.
//
//	aggregator forward --from /var/log/logagg --brokers k1:9092,k2:9092 --topic logs
//	aggregator forward --from /var/log/logagg/aggregated_logs.jsonl --brokers k1:9092 --once
//	aggregator forward --config /etc/logagg.yaml          # output.path and forward.kafka from the file
//
//	segment log (--from) ──► segment.Reader ──► kafka.Forwarder ──► Kafka
//	        ▲                                        │ acks
//	        └──── <output>.kafka.checkpoint ◄────────┘ (temp file, fsync, rename)
//
// --from names the log as the aggregator's --output does: the active file
// (aggregated_logs.jsonl by default) whose rotated segments lie beside it.
// A directory means "<dir>/aggregated_logs.jsonl", the default output name.
//
// The checkpoint defaults to the one the aggregator's own forwarder uses
// (<output>.kafka.checkpoint), so a log whose aggregator forwarded part of
// it resumes where that one stopped. Do not run both on one log at once:
// they would race on the checkpoint and ship records twice.
//
// This command deletes nothing: retention belongs to the writer.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ipclab/logagg/internal/config"
	"github.com/ipclab/logagg/internal/forward/kafka"
	"github.com/ipclab/logagg/internal/segment"
)

// defaultOutputName is the file a directory given to --from holds.
var defaultOutputName = filepath.Base(config.Default().Output.Path)

// forwardCommand runs `aggregator forward` with args (after "forward") and
// returns the exit code: 0 after a clean stop (signal, or --once with
// nothing left to ship), 1 when forwarding failed, 2 for usage errors.
func forwardCommand(args []string, stderr io.Writer) int {
	return forwardMain(args, stderr, nil)
}

// forwardMain is forwardCommand with a stop channel for in-process tests
// (nil: only SIGINT/SIGTERM stop it).
func forwardMain(args []string, stderr io.Writer, stopCh <-chan struct{}) int {
	fs := flag.NewFlagSet("aggregator forward", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: aggregator forward --from PATH --brokers HOST:PORT[,...] [flags]\n\n"+
			"Ships an existing segment log to Kafka from its checkpoint, then follows new lines\n"+
			"(--once: exits when everything present has been acknowledged).\n"+
			"PATH is the aggregator's --output file, or a directory holding %s.\n"+
			"Every flag also has the main command's name (--forward-kafka, --kafka-topic, --kafka-key, ...).\n\nflags:\n",
			defaultOutputName)
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.HasPrefix(f.Usage, "same as --") {
				name, usage := flag.UnquoteUsage(f)
				fmt.Fprintf(stderr, "  --%s %s\n    \t%s\n", f.Name, name, usage)
			}
		})
	}
	var (
		kf         kafka.Config
		brokers    string
		configPath string
		metricsAdr string
		once       bool
		logLevel   string
	)
	// alias registers v under name and, for the main command's spelling,
	// under main (hidden from the usage text).
	alias := func(v flag.Value, name, main, usage string) {
		fs.Var(v, name, usage)
		if main != "" {
			fs.Var(v, main, "same as --"+name)
		}
	}
	fs.StringVar(&configPath, "config", "", "YAML configuration `file`: output.path is the default --from, forward.kafka the defaults of the Kafka flags")
	fs.StringVar(&kf.From, "from", "", "the log to ship: the aggregator's --output `path`, or a directory holding "+defaultOutputName)
	alias(stringValue{&brokers}, "brokers", "forward-kafka", "Kafka seed `brokers` (host:port,...)")
	alias(stringValue{&kf.Topic}, "topic", "kafka-topic", "Kafka `topic` (default logagg)")
	alias(stringValue{&kf.Key}, "key", "kafka-key", "record `key`: host (default), source, producer or none")
	alias(stringValue{&kf.Compression}, "compression", "kafka-compression", "`codec`: none, gzip, snappy, lz4 (default) or zstd")
	alias(durationFlag{&kf.Linger}, "linger", "kafka-linger", "how `long` a produce batch waits to fill (default 5ms)")
	alias((*int32Flag)(&kf.BatchMaxBytes), "batch-bytes", "kafka-batch-bytes", "maximum `bytes` of one produce batch (default 1 MiB)")
	alias(intValue{&kf.MaxInFlight}, "max-in-flight", "kafka-max-in-flight", "`records` read and not yet acknowledged (default 100000)")
	alias(stringValue{&kf.CheckpointPath}, "checkpoint", "kafka-checkpoint", "checkpoint `file` (default <output>.kafka.checkpoint, the aggregator's own)")
	alias(boolValue{&kf.TLS.Enable}, "tls", "kafka-tls", "connect to the brokers with TLS")
	alias(stringValue{&kf.TLS.CAFile}, "tls-ca", "kafka-tls-ca", "CA certificate `file` for the brokers")
	alias(stringValue{&kf.TLS.CertFile}, "tls-cert", "kafka-tls-cert", "client certificate `file`")
	alias(stringValue{&kf.TLS.KeyFile}, "tls-key", "kafka-tls-key", "client key `file`")
	alias(boolValue{&kf.TLS.InsecureSkipVerify}, "tls-insecure", "kafka-tls-insecure", "do not verify the brokers' certificates")
	alias(stringValue{&kf.SASL.Mechanism}, "sasl-mechanism", "kafka-sasl-mechanism", "`mechanism`: plain, scram-sha-256 or scram-sha-512")
	alias(stringValue{&kf.SASL.User}, "sasl-user", "kafka-sasl-user", "SASL `user`")
	alias(stringValue{&kf.SASL.Password}, "sasl-password", "kafka-sasl-password", "SASL password (default $LOGAGG_KAFKA_SASL_PASSWORD, which keeps it out of ps)")
	alias(durationFlag{&kf.DrainTimeout}, "drain-timeout", "", "on stop, how `long` in-flight records get to be acknowledged (default 10s)")
	fs.StringVar(&metricsAdr, "metrics", "", "serve Prometheus /metrics on `host:port` (logagg_forward_kafka_*)")
	fs.BoolVar(&once, "once", false, "exit 0 once everything in the log has been acknowledged (backfills) instead of following it")
	fs.StringVar(&logLevel, "log-level", "warn", "`level`: debug, info, warn or error (logs go to stderr)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "aggregator forward: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[strings.TrimPrefix(f.Name, "kafka-")] = true })
	if set["forward-kafka"] {
		set["brokers"] = true
	}

	// Start from the config file, then let every explicit flag win.
	cfg := kafka.Config{}
	if configPath != "" {
		c, err := config.Load(configPath)
		if err != nil {
			fmt.Fprintln(stderr, "aggregator forward:", err)
			return 2
		}
		if k := c.KafkaConfig(); k != nil {
			cfg = *k
		} else {
			cfg.From = c.Output.Path
		}
	}
	mergeForwardFlags(&cfg, &kf, brokers, set)
	if cfg.Topic == "" {
		cfg.Topic = "logagg"
	}
	if cfg.SASL.Password == "" {
		cfg.SASL.Password = os.Getenv("LOGAGG_KAFKA_SASL_PASSWORD")
	}
	from, err := resolveFrom(cfg.From)
	if err != nil {
		fmt.Fprintln(stderr, "aggregator forward:", err)
		return 2
	}
	cfg.From = from

	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		fmt.Fprintf(stderr, "aggregator forward: --log-level: %v\n", err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg.Log = logger.With("forwarder", "kafka")

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	fwd, err := kafka.New(cfg, reg)
	if err != nil {
		fmt.Fprintln(stderr, "aggregator forward:", err)
		if errors.Is(err, kafka.ErrConfig) {
			return 2
		}
		return 1
	}

	var srv *http.Server
	if metricsAdr != "" {
		ln, err := net.Listen("tcp", metricsAdr)
		if err != nil {
			fmt.Fprintf(stderr, "aggregator forward: metrics listen %s: %v\n", metricsAdr, err)
			return 1
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("metrics server", "err", err)
			}
		}()
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			srv.Shutdown(ctx)
			cancel()
		}()
		fmt.Fprintf(stderr, "aggregator forward: metrics on http://%s/metrics\n", ln.Addr())
	}

	// What we are doing, once: the only output of normal operation.
	resume := "the start of the log"
	if cp := fwd.Checkpoint(); cp.Seq != 0 {
		resume = "checkpoint " + cp.String()
	}
	mode := "then following it"
	if once {
		mode = "until lag is 0 (--once)"
	}
	ckPath := cfg.CheckpointPath
	if ckPath == "" {
		ckPath = segment.CheckpointPath(cfg.From, "kafka")
	}
	fmt.Fprintf(stderr, "aggregator forward: shipping %s from %s (%s) to topic %s on %s, %s\n",
		cfg.From, resume, ckPath, cfg.Topic, strings.Join(cfg.Brokers, ","), mode)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case <-sigs:
		case <-stopCh:
		case <-ctx.Done():
		}
		cancel()
	}()

	runDone := make(chan error, 1)
	go func() { runDone <- fwd.Run(ctx) }()
	var runErr error
	if once {
		runErr = waitCaughtUp(fwd, cfg.From, runDone, cancel)
	} else {
		runErr = <-runDone
	}
	if runErr != nil {
		fmt.Fprintln(stderr, "aggregator forward:", runErr)
		return 1
	}
	return 0
}

// waitCaughtUp polls until every complete line of the log has been
// acknowledged, then stops the forwarder (cancel ends Run's context, so it
// drains and saves the checkpoint) and returns Run's result. A run that
// ends first (signal, error) returns that.
func waitCaughtUp(fwd *kafka.Forwarder, output string, runDone <-chan error, cancel context.CancelFunc) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case err := <-runDone:
			return err
		case <-t.C:
		}
		done, err := caughtUp(fwd.Stats(), output)
		if err != nil {
			cancel()
			<-runDone
			return err
		}
		if done {
			cancel()
			return <-runDone
		}
	}
}

// caughtUp reports whether the forwarder has acknowledged every complete
// line present: nothing in flight, the acknowledged position in the active
// segment, and no '\n' after it in that file (a partial last line, still
// being written or torn by a crash, is not "present").
func caughtUp(st kafka.Stats, output string) (bool, error) {
	if st.InFlight != 0 {
		return false, nil
	}
	active, err := segment.ActiveSeq(output)
	if err != nil {
		return false, err
	}
	pos := st.Acked
	if pos.Seq == 0 {
		// Nothing acknowledged yet: caught up only if the log is empty.
		seqs, err := segment.ListRotated(output)
		if err != nil {
			return false, err
		}
		if len(seqs) > 0 {
			return false, nil
		}
		pos = segment.Position{Seq: active}
	}
	if pos.Seq < active {
		return false, nil
	}
	f, err := os.Open(output)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("check lag: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(pos.Offset, io.SeekStart); err != nil {
		return false, fmt.Errorf("check lag: %w", err)
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		for _, c := range buf[:n] {
			if c == '\n' {
				return false, nil
			}
		}
		if errors.Is(err, io.EOF) || n == 0 {
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("check lag: %w", err)
		}
	}
}

// resolveFrom turns --from into the output path: a directory means the
// default output file inside it. The log must exist (a typo should not
// make us wait forever for a file nobody writes): the active file, a
// directory, or at least one rotated segment.
func resolveFrom(from string) (string, error) {
	if from == "" {
		return "", errors.New("--from is required: the aggregator's --output file or its directory")
	}
	st, err := os.Stat(from)
	if err == nil && st.IsDir() {
		return filepath.Join(from, defaultOutputName), nil
	}
	if err == nil {
		if !st.Mode().IsRegular() {
			return "", fmt.Errorf("--from %s is neither a file nor a directory", from)
		}
		return from, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("--from: %w", err)
	}
	if seqs, lerr := segment.ListRotated(from); lerr == nil && len(seqs) > 0 {
		return from, nil // between a rotation and the next write
	}
	return "", fmt.Errorf("--from %s: no such log (neither the file, its rotated segments nor a directory exist)", from)
}

// mergeForwardFlags copies the explicitly set flags (set, by their short
// names) from kf over cfg.
func mergeForwardFlags(cfg, kf *kafka.Config, brokers string, set map[string]bool) {
	if set["brokers"] {
		cfg.Brokers = nil
		for _, b := range strings.Split(brokers, ",") {
			if b = strings.TrimSpace(b); b != "" {
				cfg.Brokers = append(cfg.Brokers, b)
			}
		}
	}
	copyIf := func(name string, f func()) {
		if set[name] {
			f()
		}
	}
	copyIf("from", func() { cfg.From = kf.From })
	copyIf("topic", func() { cfg.Topic = kf.Topic })
	copyIf("key", func() { cfg.Key = kf.Key })
	copyIf("compression", func() { cfg.Compression = kf.Compression })
	copyIf("linger", func() { cfg.Linger = kf.Linger })
	copyIf("batch-bytes", func() { cfg.BatchMaxBytes = kf.BatchMaxBytes })
	copyIf("max-in-flight", func() { cfg.MaxInFlight = kf.MaxInFlight })
	copyIf("checkpoint", func() { cfg.CheckpointPath = kf.CheckpointPath })
	copyIf("tls", func() { cfg.TLS.Enable = kf.TLS.Enable })
	copyIf("tls-ca", func() { cfg.TLS.CAFile = kf.TLS.CAFile })
	copyIf("tls-cert", func() { cfg.TLS.CertFile = kf.TLS.CertFile })
	copyIf("tls-key", func() { cfg.TLS.KeyFile = kf.TLS.KeyFile })
	copyIf("tls-insecure", func() { cfg.TLS.InsecureSkipVerify = kf.TLS.InsecureSkipVerify })
	copyIf("sasl-mechanism", func() { cfg.SASL.Mechanism = kf.SASL.Mechanism })
	copyIf("sasl-user", func() { cfg.SASL.User = kf.SASL.User })
	copyIf("sasl-password", func() { cfg.SASL.Password = kf.SASL.Password })
	copyIf("drain-timeout", func() { cfg.DrainTimeout = kf.DrainTimeout })
}

type stringValue struct{ p *string }

func (v stringValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}
func (v stringValue) Set(s string) error { *v.p = s; return nil }

type boolValue struct{ p *bool }

func (v boolValue) String() string {
	if v.p == nil {
		return "false"
	}
	return fmt.Sprint(*v.p)
}
func (v boolValue) Set(s string) error {
	b, err := parseBool(s)
	*v.p = b
	return err
}
func (v boolValue) IsBoolFlag() bool { return true }

func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "1", "t", "true":
		return true, nil
	case "0", "f", "false":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean", s)
}

type intValue struct{ p *int }

func (v intValue) String() string {
	if v.p == nil {
		return "0"
	}
	return fmt.Sprint(*v.p)
}
func (v intValue) Set(s string) error {
	var n int
	_, err := fmt.Sscan(s, &n)
	*v.p = n
	return err
}
