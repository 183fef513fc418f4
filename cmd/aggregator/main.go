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
	"strings"
	"syscall"
	"time"

	"github.com/ipclab/logagg/internal/config"
	"github.com/ipclab/logagg/internal/daemon"
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
		case "tap": // aggregator tap --control PATH
			os.Exit(tapCommand(os.Args[2:], os.Stdout, os.Stderr))
		}
	}
	os.Exit(run(os.Args[1:], os.Stderr))
}

// commandFlags is a command's flag set with every setting registered
// (config.Settings) and a usage text that lists them in their order.
func commandFlags(name, usage string, naming config.Naming, base config.Config, stderr io.Writer) (*flag.FlagSet, *config.Flags) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags := config.NewFlags(fs, naming, base)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage+"\nflags:\n")
		flags.PrintUsage(stderr)
	}
	return fs, flags
}

// parse parses args; ok is false when the command must exit with code.
func parse(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	return 0, true
}

const mainUsage = `usage: aggregator [flags] [unixsock|tcp|unixgram|udp|fifo|shm|mq|all ...]
       aggregator run [flags] -- CMD ARGS...   capture CMD's stdout/stderr
       aggregator forward --from PATH ...      ship an existing log to Kafka or an OTLP endpoint
       aggregator check-config [--print] FILE  validate a configuration file (exit 0 valid, 1 not)
       aggregator tap --control PATH [--match YAML]  watch the records flowing through a running daemon
`

// run is the aggregator itself: parse, load, build the daemon, serve.
func run(args []string, stderr io.Writer) int {
	fs, flags := commandFlags("aggregator", mainUsage, config.MainNames, config.Default(), stderr)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	// The file is read again at every reload, and the flags applied over it.
	load := func() (config.Config, error) {
		cfg, err := flags.Load()
		if err != nil {
			return cfg, err
		}
		return cfg, addNamedTransports(&cfg, fs.Args())
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
	return serve(cfg, load, stderr)
}

// addNamedTransports adds the listen URLs of transport names (unixsock,
// tcp, ..., all) given as arguments.
func addNamedTransports(cfg *config.Config, names []string) error {
	for _, name := range names {
		if name == "all" {
			for _, n := range allSeed {
				cfg.Listen = append(cfg.Listen, seedTransports[n])
			}
			continue
		}
		u, ok := seedTransports[name]
		if !ok {
			return fmt.Errorf("unknown transport %q (want unixsock, tcp, unixgram, udp, fifo, shm, mq or all; or use --listen URL)", name)
		}
		cfg.Listen = append(cfg.Listen, u)
	}
	return nil
}

// serve builds the daemon from cfg and runs it until a signal stops it;
// load reads the configuration again on SIGHUP.
func serve(cfg config.Config, load func() (config.Config, error), stderr io.Writer) int {
	logger := newLogger(stderr, cfg.LogLevel)
	stop, stopNow := context.WithCancel(context.Background())
	hardStop, hardStopNow := context.WithCancel(context.Background())
	defer stopNow()
	defer hardStopNow()

	// Signals are caught before anything says we are up (the addresses on
	// stderr, READY=1): a SIGHUP sent on that word (systemctl reload, a
	// test) must reload, not kill. Until the handler runs they wait here.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

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
	printAddresses(stderr, d, cfg, "")

	// Every listener is bound and the output open: systemd may start the
	// units ordered after us.
	ntf := newNotifier(logger)
	defer ntf.close()
	notifyCtx, stopNotify := context.WithCancel(context.Background())
	defer stopNotify()
	ntf.ready(notifyCtx, d)

	go handleSignals(sigs, d, load, ntf, logger, stderr, func() {
		stopNow()
		time.AfterFunc(cfg.DrainTimeout, hardStopNow)
	}, hardStopNow)

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

// printAddresses prints the one thing normal operation prints: where we
// listen (but skip, a captured child's URL), the metrics URL and the
// output.
func printAddresses(stderr io.Writer, d *daemon.Daemon, cfg config.Config, skip string) {
	for _, u := range d.ListenURLs() {
		if u != skip {
			fmt.Fprintf(stderr, "aggregator: listening on %s\n", u)
		}
	}
	if a := d.MetricsAddr(); a != "" {
		fmt.Fprintf(stderr, "aggregator: metrics on http://%s/metrics\n", a)
	}
	fmt.Fprintf(stderr, "aggregator: writing %s\n", cfg.Output.Path)
}

// handleSignals serves the signals: SIGHUP reloads, the first SIGINT or
// SIGTERM starts the drain (stop), a second one ends it (hardStop).
func handleSignals(sigs <-chan os.Signal, d *daemon.Daemon, load func() (config.Config, error), ntf *notifier,
	logger *slog.Logger, stderr io.Writer, stop, hardStop func()) {
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
			stop()
		default:
			logger.Warn("second signal: ending the drain now")
			hardStop()
		}
	}
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
	if !errors.Is(err, daemon.ErrStopping) {
		// Reopened before the refusal is logged: whoever waits for that
		// line (an operator, logrotate's script, TestReload) then finds
		// records going to the running path, not to the file moved away.
		if rerr := d.Reopen(ctx); rerr != nil {
			logger.Error("reopen output", "err", rerr)
		}
	}
	logger.Error("reload refused; the running configuration is kept", "err", err)
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
