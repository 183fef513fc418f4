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
	"fmt"
	"io"
	"log/slog"
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
	fs, flags := commandFlags("aggregator run", runUsage, config.MainNames, config.Default(), stderr)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	argv := fs.Args()
	if len(argv) == 0 {
		fmt.Fprintln(stderr, "aggregator run: no command (usage: aggregator run [flags] -- CMD [ARGS...])")
		return 2
	}
	cfg, err := flags.Load()
	if err != nil {
		fmt.Fprintln(stderr, "aggregator run:", err)
		return 2
	}
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
	return runChild(cfg, child, stderr)
}

const runUsage = `usage: aggregator run [flags] -- CMD [ARGS...]

Runs CMD, writes its stdout and stderr lines and its exit status as records,
forwards signals to it and exits with its status. --listen URLs are served
while CMD runs; the output is fsynced at exit whatever --fsync says.
`

// runChild runs the daemon with child as one of its listeners until the
// child exited and everything is drained, and returns the child's status.
func runChild(cfg config.Config, child *capture.Child, stderr io.Writer) int {
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
	printAddresses(stderr, d, cfg, child.URL())
	go func() {
		select {
		case <-child.Done():
		case <-stop.Done(): // a listener failed: the daemon stops the child
		}
		stopNow()
		time.AfterFunc(cfg.DrainTimeout, hardStopNow)
	}()
	go forwardSignals(sigs, child, d, logger, hardStopNow)

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

// forwardSignals passes signals on to the child; SIGHUP also reopens the
// output (what logrotate expects of us). Once the child has exited, SIGINT
// or SIGTERM means the drain takes too long: it ends it.
func forwardSignals(sigs <-chan os.Signal, child *capture.Child, d *daemon.Daemon, logger *slog.Logger, hardStop func()) {
	for s := range sigs {
		sig := s.(syscall.Signal)
		select {
		case <-child.Done():
			if sig == syscall.SIGINT || sig == syscall.SIGTERM {
				logger.Warn("signal after the child exited: ending the drain now")
				hardStop()
			}
			continue
		default:
		}
		if sig == syscall.SIGHUP {
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
