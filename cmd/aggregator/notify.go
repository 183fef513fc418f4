package main

// Telling systemd how the daemon is doing (Type=notify units):
//
//	daemon.New returned (every listener bound, output open) ─► LOGAGG_LISTEN=…, LOGAGG_METRICS=…, READY=1
//	every StatusInterval                                     ─► STATUS=records/s, queue depth
//	every WatchdogSec/2 (WATCHDOG_USEC, WATCHDOG_PID)        ─► WATCHDOG=1
//	SIGHUP                                                   ─► RELOADING=1 … LOGAGG_LISTEN=…, READY=1
//	first SIGINT/SIGTERM                                     ─► STOPPING=1
//
// Without $NOTIFY_SOCKET every call is a no-op.
//
// LOGAGG_LISTEN= (one per bound listener, with the real port of a :0) and
// LOGAGG_METRICS= (the metrics URL, when served) come before READY=1, in
// its datagram or in earlier ones: a program that starts the aggregator
// (ipcbench's harness) learns where it listens without reading its log.
// systemd ignores assignments it does not know (sd_notify(3)).

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/daemon"
	"github.com/ipclab/logagg/internal/systemd"
)

// statusInterval is how often STATUS= is refreshed: often enough for
// `systemctl status` to show a current rate, rarely enough to cost nothing.
const statusInterval = 5 * time.Second

// notifyDatagramMax is the longest notification systemd reads
// (NOTIFY_BUFFER_MAX, PIPE_BUF): it ignores a longer datagram whole, and
// READY=1 with it.
const notifyDatagramMax = 4096

// The readiness variables of our own (docs/service.md).
const (
	listenVar  = "LOGAGG_LISTEN="
	metricsVar = "LOGAGG_METRICS="
)

// notifier wraps systemd.Notifier with the daemon's status line and logs
// a failed send once instead of failing: the manager's socket going away
// must not stop the logging.
type notifier struct {
	n      *systemd.Notifier
	log    *slog.Logger
	d      *daemon.Daemon
	warned sync.Once

	mu       sync.Mutex
	lastN    int64
	lastTime time.Time
}

func newNotifier(log *slog.Logger) *notifier {
	n, err := systemd.NewNotifier()
	if err != nil {
		log.Warn("not notifying the service manager", "err", err)
	}
	return &notifier{n: n, log: log}
}

func (n *notifier) send(states ...string) {
	if err := n.n.Notify(states...); err != nil {
		n.warned.Do(func() { n.log.Warn("service manager notification failed", "err", err) })
	}
}

// sendReady sends where the daemon listens, then READY=1 and extra, in
// as few datagrams as notifyDatagramMax allows.
func (n *notifier) sendReady(extra ...string) {
	states := append(addresses(n.d), "READY=1")
	for _, states := range pack(append(states, extra...), notifyDatagramMax) {
		n.send(states...)
	}
}

// addresses are the LOGAGG_LISTEN= and LOGAGG_METRICS= assignments of
// the daemon's bound addresses.
func addresses(d *daemon.Daemon) []string {
	var out []string
	for _, u := range d.ListenURLs() {
		out = append(out, listenVar+u)
	}
	if a := d.MetricsAddr(); a != "" {
		out = append(out, metricsVar+"http://"+a+"/metrics")
	}
	return out
}

// pack splits states, in order, into datagrams of at most limit bytes
// (states joined by newlines). A state longer than limit goes alone.
func pack(states []string, limit int) [][]string {
	var out [][]string
	var cur []string
	size := 0
	for _, s := range states {
		if len(cur) > 0 && size+1+len(s) > limit {
			out = append(out, cur)
			cur, size = nil, 0
		}
		if len(cur) > 0 {
			size++ // the newline before s
		}
		cur = append(cur, s)
		size += len(s)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// status is the STATUS= line: records/s since the last one, total
// written and the queue's depth.
func (n *notifier) status() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	now, written := time.Now(), n.d.Written()
	rate := 0.0
	if !n.lastTime.IsZero() {
		if dt := now.Sub(n.lastTime).Seconds(); dt > 0 {
			rate = float64(written-n.lastN) / dt
		}
	}
	n.lastN, n.lastTime = written, now
	depth, capacity := n.d.QueueDepth()
	return fmt.Sprintf("STATUS=%.0f records/s, %d written, queue %d/%d batches", rate, written, depth, capacity)
}

// ready says the daemon serves, and starts the watchdog and the status
// updates, which run until ctx ends.
func (n *notifier) ready(ctx context.Context, d *daemon.Daemon) {
	if n.n == nil {
		return
	}
	n.d = d
	n.sendReady(n.status())
	go n.every(ctx, statusInterval, func() { n.send(n.status()) })
	iv, err := systemd.WatchdogInterval()
	if err != nil {
		n.log.Warn("watchdog not armed", "err", err)
	}
	if iv > 0 {
		// The pings come from their own goroutine: they prove the process
		// and its scheduler live, not that records flow. A full disk
		// holds the writer back by design (producers wait), and a
		// watchdog tied to the writer would restart the daemon in a loop
		// there instead of letting it retry.
		n.send("WATCHDOG=1")
		go n.every(ctx, iv, func() { n.send("WATCHDOG=1") })
	}
}

func (n *notifier) every(ctx context.Context, iv time.Duration, f func()) {
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			f()
		case <-ctx.Done():
			return
		}
	}
}

// reloading and reloaded bracket a reload (SIGHUP). MONOTONIC_USEC lets
// systemd (253+, Type=notify-reload) tell this reload from an earlier one.
func (n *notifier) reloading() {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	n.send("RELOADING=1", "MONOTONIC_USEC="+strconv.FormatInt(ts.Nano()/1000, 10))
}

func (n *notifier) reloaded() {
	if n.d == nil {
		n.send("READY=1")
		return
	}
	n.sendReady(n.status())
}

func (n *notifier) stopping() { n.send("STOPPING=1", "STATUS=draining") }

func (n *notifier) close() { n.n.Close() }
