package main

// aggregator forward: the Kafka or the OTLP forwarder on its own, shipping
// a log that some aggregator wrote (now or earlier) without running any
// listener.
//
//	aggregator forward --from /var/log/logagg --brokers k1:9092,k2:9092 --topic logs
//	aggregator forward --from /var/log/logagg/aggregated_logs.jsonl --brokers k1:9092 --once
//	aggregator forward --from /var/log/logagg --forward-otlp collector:4317 --once
//	aggregator forward --config /etc/logagg.yaml          # output.path and forward.kafka or forward.otlp from the file
//
//	segment log (--from) ──► segment.Reader ──► kafka / otlp Forwarder ──► Kafka / OTLP endpoint
//	        ▲                                        │ acks
//	        └── <output>.{kafka,otlp}.checkpoint ◄───┘ (temp file, fsync, rename)
//
// --from names the log as the aggregator's --output does: the active file
// (aggregated_logs.jsonl by default) whose rotated segments lie beside it.
// A directory means "<dir>/aggregated_logs.jsonl", the default output name.
//
// One run ships to one destination. The checkpoint defaults to the one the
// aggregator's own forwarder of that kind uses (<output>.kafka.checkpoint,
// <output>.otlp.checkpoint), so a log whose aggregator forwarded part of it
// resumes where that one stopped. Do not run both on one log at once:
// they would race on the checkpoint and ship records twice.
//
// This command deletes nothing: retention belongs to the writer.

import (
	"context"
	"errors"
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
	otlpfwd "github.com/ipclab/logagg/internal/forward/otlp"
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
	base := config.Default()
	base.LogLevel = "warn"
	fs, flags := commandFlags("aggregator forward", forwardUsage, config.ForwardNames, base, stderr)
	once := fs.Bool("once", false, "exit 0 once everything in the log has been acknowledged (backfills) instead of following it")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "aggregator forward: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg, plan, err := forwardConfig(flags)
	if err != nil {
		fmt.Fprintln(stderr, "aggregator forward:", err)
		return 2
	}
	logger := newLogger(stderr, cfg.LogLevel)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	fwd, err := plan.open(logger, reg)
	if err != nil {
		fmt.Fprintln(stderr, "aggregator forward:", err)
		if errors.Is(err, kafka.ErrConfig) || errors.Is(err, otlpfwd.ErrConfig) {
			return 2
		}
		return 1
	}
	if cfg.Metrics != "" {
		stopMetrics, err := serveForwardMetrics(cfg.Metrics, reg, logger, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "aggregator forward:", err)
			return 1
		}
		defer stopMetrics()
	}
	printForwardPlan(stderr, fwd, plan, *once)

	ctx, cancel := stopOnSignal(stopCh)
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- fwd.Run(ctx) }()
	runErr := <-runDoneOrCaughtUp(fwd, runDone, cancel, *once)
	if runErr != nil {
		fmt.Fprintln(stderr, "aggregator forward:", runErr)
		return 1
	}
	return 0
}

const forwardUsage = `usage: aggregator forward --from PATH --brokers HOST:PORT[,...] [flags]
       aggregator forward --from PATH --forward-otlp ENDPOINT [flags]

Ships an existing segment log to Kafka or to an OTLP endpoint from its checkpoint, then
follows new lines (--once: exits when everything present has been acknowledged).
PATH is the aggregator's --output file, or a directory holding aggregated_logs.jsonl.
Every Kafka flag also has the main command's name (--forward-kafka, --kafka-topic, ...);
the OTLP flags are the main command's (--otlp-protocol, --otlp-tls-ca, ...).
`

// shipper is the forwarder forward runs: Kafka's or OTLP's.
type shipper interface {
	Run(ctx context.Context) error
	CaughtUp() (bool, error)
	Checkpoint() segment.Position
	CheckpointPath() string
}

// forwardPlan is what forward ships, where to, and how to start it.
type forwardPlan struct {
	from, to string
	open     func(logger *slog.Logger, reg prometheus.Registerer) (shipper, error)
}

// forwardConfig is forward's configuration: the file (output.path is the
// default --from, forward.kafka or forward.otlp the defaults of the flags),
// then the flags; logs at warn unless told otherwise. OTLP when an
// endpoint is given, else Kafka; not both in one run.
func forwardConfig(flags *config.Flags) (config.Config, forwardPlan, error) {
	cfg, err := flags.Load()
	if err != nil {
		return cfg, forwardPlan{}, err
	}
	if flags.File() == "" && !flags.Given("forward.kafka.from") {
		return cfg, forwardPlan{}, errors.New("--from is required: the aggregator's --output file or its directory")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return cfg, forwardPlan{}, fmt.Errorf("--log-level: %w", err)
	}
	if oc := cfg.OTLPConfig(); oc != nil && oc.Endpoint != "" {
		if kc := cfg.KafkaConfig(); kc != nil && len(kc.Brokers) > 0 {
			return cfg, forwardPlan{}, errors.New("both Kafka brokers and an OTLP endpoint given: one forward ships to one destination (run one per destination; each keeps its own checkpoint)")
		}
		if flags.Given("forward.kafka.from") { // --from names the log whatever the destination
			oc.From = cfg.Forward.Kafka.From
		}
		if oc.From, err = resolveFrom(oc.From); err != nil {
			return cfg, forwardPlan{}, err
		}
		plan := forwardPlan{from: oc.From, to: "OTLP endpoint " + oc.Endpoint}
		if oc.Protocol != "" {
			plan.to += " (" + oc.Protocol + ")"
		}
		plan.open = func(logger *slog.Logger, reg prometheus.Registerer) (shipper, error) {
			oc.Log = logger.With("forwarder", "otlp")
			return otlpfwd.New(*oc, reg)
		}
		return cfg, plan, nil
	}
	if cfg.Forward.Kafka == nil {
		cfg.Forward.Kafka = &kafka.Config{Topic: config.DefaultKafkaTopic}
	}
	kc := *cfg.KafkaConfig()
	if kc.From, err = resolveFrom(kc.From); err != nil {
		return cfg, forwardPlan{}, err
	}
	plan := forwardPlan{from: kc.From, to: "topic " + kc.Topic + " on " + strings.Join(kc.Brokers, ",")}
	plan.open = func(logger *slog.Logger, reg prometheus.Registerer) (shipper, error) {
		kc.Log = logger.With("forwarder", "kafka")
		return kafka.New(kc, reg)
	}
	return cfg, plan, nil
}

// serveForwardMetrics serves reg on addr until the returned stop is called.
func serveForwardMetrics(addr string, reg *prometheus.Registry, logger *slog.Logger, stderr io.Writer) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics server", "err", err)
		}
	}()
	fmt.Fprintf(stderr, "aggregator forward: metrics on http://%s/metrics\n", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		srv.Shutdown(ctx)
		cancel()
	}, nil
}

// printForwardPlan says what forward is doing, once: the only output of
// normal operation.
func printForwardPlan(stderr io.Writer, fwd shipper, plan forwardPlan, once bool) {
	resume := "the start of the log"
	if cp := fwd.Checkpoint(); cp.Seq != 0 {
		resume = "checkpoint " + cp.String()
	}
	mode := "then following it"
	if once {
		mode = "until lag is 0 (--once)"
	}
	fmt.Fprintf(stderr, "aggregator forward: shipping %s from %s (%s) to %s, %s\n",
		plan.from, resume, fwd.CheckpointPath(), plan.to, mode)
}

// stopOnSignal is a context that SIGINT, SIGTERM or stopCh ends.
func stopOnSignal(stopCh <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		defer signal.Stop(sigs)
		select {
		case <-sigs:
		case <-stopCh:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx, cancel
}

// runDoneOrCaughtUp is Run's result; with once, Run is stopped (and its
// result delivered) as soon as everything in the log is acknowledged.
func runDoneOrCaughtUp(fwd shipper, runDone chan error, cancel context.CancelFunc, once bool) <-chan error {
	if !once {
		return runDone
	}
	out := make(chan error, 1)
	go func() { out <- waitCaughtUp(fwd, runDone, cancel) }()
	return out
}

// waitCaughtUp polls until every complete line of the log has been
// acknowledged (Forwarder.CaughtUp), then stops the forwarder (cancel ends
// Run's context, so it drains and saves the checkpoint) and returns Run's
// result. A run that ends first (signal, error) returns that.
func waitCaughtUp(fwd shipper, runDone <-chan error, cancel context.CancelFunc) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case err := <-runDone:
			return err
		case <-t.C:
		}
		done, err := fwd.CaughtUp()
		if err != nil {
			cancel()
			<-runDone
			return fmt.Errorf("check lag: %w", err)
		}
		if done {
			cancel()
			return <-runDone
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
