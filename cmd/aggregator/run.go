package main

// aggregator run [flags] -- CMD ARGS...
//
//	CMD's stdout ─pipe─► stream.Reader (stream "stdout") ─┐
//	CMD's stderr ─pipe─► stream.Reader (stream "stderr") ─┼─► queue ─► writer ─► output
//	CMD's exit status ──► one "exit" record ──────────────┘        ▲
//	--listen URLs (optional) ─► their listeners ───────────────────┘
//	signals to the aggregator ─► CMD's process group
//
// The child is one more listener of the daemon (internal/capture, scheme
// "exec"): the daemon binds everything, then starts it. When the child has
// exited and its output is submitted, the other listeners are stopped and
// drained, the output is fsynced, and the aggregator exits with the child's
// status (its exit code, or 128+signal), like `sh -c`.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/capture"
	"github.com/ipclab/logagg/internal/config"
	"github.com/ipclab/logagg/internal/daemon"
	_ "github.com/ipclab/logagg/internal/transport/stdin" // stdin:// (until transport/all imports it)
)

// forwarded are the signals passed on to the child instead of acting on
// them ourselves: the child decides when it ends, we follow.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// runCommand is `aggregator run`; args are the arguments after "run". It
// returns the process exit status.
func runCommand(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("aggregator run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: aggregator run [flags] -- CMD [ARGS...]\n\n"+
			"Runs CMD, writes its stdout and stderr lines and its exit status as records,\n"+
			"forwards signals to it and exits with its status.\n\nflags:\n")
		fs.PrintDefaults()
	}
	fl := config.Default()
	var listen listFlag
	configPath := fs.String("config", "", "YAML configuration `file`; flags given explicitly override it")
	fs.Var(&listen, "listen", "also listen on `URL` (repeatable) while CMD runs")
	fs.StringVar(&fl.Output.Path, "output", fl.Output.Path, "output JSON-lines `file`")
	fs.Var(&fl.Output.MaxSize, "max-size", "rotate the output at this `size` (0 = never)")
	fs.IntVar(&fl.Output.MaxFiles, "max-files", fl.Output.MaxFiles, "rotated segments to keep (0 = all)")
	fs.StringVar(&fl.Output.Fsync, "fsync", fl.Output.Fsync, "when to fsync: never, batch, or interval=DURATION (always at exit)")
	fs.StringVar(&fl.Metrics, "metrics", "", "serve Prometheus /metrics and /healthz on `host:port`")
	fs.Var(&fl.Limits.MaxRecord, "max-record", "truncate records longer than this `size`")
	fs.Var(&fl.Sockets.RcvBuf, "rcvbuf", "requested pipe / socket receive buffer `size`")
	fs.IntVar(&fl.Queue.Batches, "queue-batches", fl.Queue.Batches, "batches the queue between listeners and writer holds")
	fs.Var(&fl.Queue.BatchBytes, "batch-bytes", "`size` at which a listener hands a batch to the writer")
	fs.Var(durationFlag{&fl.DrainTimeout}, "drain-timeout", "bound on the drain after CMD exited")
	fs.StringVar(&fl.LogLevel, "log-level", fl.LogLevel, "debug, info, warn or error (logs go to stderr)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	argv := fs.Args()
	if len(argv) == 0 {
		fmt.Fprintln(stderr, "aggregator run: no command (usage: aggregator run [flags] -- CMD [ARGS...])")
		return 2
	}

	cfg := config.Default()
	if *configPath != "" {
		c, err := config.Load(*configPath)
		if err != nil {
			fmt.Fprintln(stderr, "aggregator run:", err)
			return 2
		}
		cfg = c
	}
	fs.Visit(func(f *flag.Flag) { applyFlag(&cfg, &fl, f.Name) })
	cfg.Listen = append(cfg.Listen, listen...)

	// The child shares our stdin unless stdin:// reads it or it is a
	// terminal (the child runs in its own process group, where reading the
	// terminal would stop it with SIGTTIN).
	var childStdin *os.File
	if !readsStdin(cfg.Listen) && !isTerminal(os.Stdin) {
		childStdin = os.Stdin
	}
	child, err := capture.New(capture.Command{Argv: argv, Stdin: childStdin})
	if err != nil {
		fmt.Fprintln(stderr, "aggregator run:", err)
		return 127
	}
	defer child.Close()
	cfg.Listen = append(cfg.Listen, child.URL())
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "aggregator run: invalid configuration:\n%v\n", err)
		return 2
	}
	logger := newLogger(stderr, cfg.LogLevel)

	stop, stopNow := context.WithCancel(context.Background())
	hardStop, hardStopNow := context.WithCancel(context.Background())
	defer stopNow()
	defer hardStopNow()

	// Catch the signals before the child exists, so none is lost between
	// its start and the forwarding loop.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	d, err := daemon.New(cfg, logger, hardStop, daemon.WithSource(child))
	if err != nil {
		fmt.Fprintln(stderr, "aggregator run:", err)
		return 1
	}
	for _, u := range d.ListenURLs() {
		if u != child.URL() {
			fmt.Fprintf(stderr, "aggregator: listening on %s\n", u)
		}
	}
	if a := d.MetricsAddr(); a != "" {
		fmt.Fprintf(stderr, "aggregator: metrics on http://%s/metrics\n", a)
	}
	fmt.Fprintf(stderr, "aggregator: writing %s\n", cfg.Output.Path)

	go func() {
		select {
		case <-child.Done():
		case <-stop.Done(): // a listener failed: the daemon stops the child
		}
		stopNow()
		time.AfterFunc(cfg.DrainTimeout, hardStopNow)
	}()
	go func() {
		for s := range sigs {
			sig := s.(syscall.Signal)
			select {
			case <-child.Done():
				// Nothing left to forward to: a signal now means the
				// drain takes too long.
				if sig == syscall.SIGINT || sig == syscall.SIGTERM {
					logger.Warn("signal after the child exited: ending the drain now")
					hardStopNow()
				}
				continue
			default:
			}
			if sig == syscall.SIGHUP {
				// Also what logrotate expects of us.
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if err := d.Reopen(ctx); err != nil {
					logger.Error("reopen output", "err", err)
				}
				cancel()
			}
			if err := child.Signal(sig); err != nil {
				logger.Debug("signal not forwarded", "signal", sig, "err", err)
			}
		}
	}()

	runErr := d.Run(stop, hardStop)
	st := child.Status()
	lost := reportLost(stderr, d.Lost())
	if runErr != nil || lost {
		if runErr != nil {
			fmt.Fprintln(stderr, "aggregator run:", runErr)
		}
		if code := st.ExitCode(); code != 0 {
			return code
		}
		return 1
	}
	return st.ExitCode()
}

func readsStdin(listen []string) bool {
	for _, l := range listen {
		if u, err := url.Parse(l); err == nil && u.Scheme == "stdin" {
			return true
		}
	}
	return false
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
