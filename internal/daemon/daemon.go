// Package daemon wires the aggregator: listeners → sink → queue → writer →
// segment log, plus the metrics endpoint and the Kafka forwarder.
//
//	producers ──► listeners (one per listen URL; connections on the event
//	                 │        loops, one per CPU; pipes, rings and queues on
//	                 │        a goroutine each)
//	                 ▼
//	          sink (package sink: decode, encode, count, batch; one Emitter
//	                 │  per loop and listener, or per reader goroutine)
//	                 │  Submit(batch) blocks when the queue is full (backpressure)
//	                 ▼
//	          pipeline.Queue (bounded, batches of JSON lines)
//	                 │
//	                 ▼
//	          pipeline.Writer (one goroutine, one writev per gathered batches)
//	                 │
//	                 ▼
//	          segment.Log (aggregated_logs.jsonl, rotation, fsync policy) ──► Kafka forwarder
//
// Shutdown is two-staged: ending the stop context makes listeners stop
// accepting and drain what the kernel holds; the writer then writes
// everything queued, fsyncs and returns. The hard-stop context bounds the
// whole drain (--drain-timeout or a second signal); what it cuts off is
// counted, in records and bytes, by the sink.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ipclab/logagg/internal/budget"
	"github.com/ipclab/logagg/internal/config"
	"github.com/ipclab/logagg/internal/control"
	"github.com/ipclab/logagg/internal/forward/kafka"
	otlpfwd "github.com/ipclab/logagg/internal/forward/otlp"
	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/rules"
	"github.com/ipclab/logagg/internal/segment"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/evloop"
)

// Daemon is one configured aggregator. Create it with New, then call Run once.
type Daemon struct {
	cfg      config.Config
	budget   Budget
	log      *slog.Logger
	Registry *prometheus.Registry
	Metrics  *metrics.Metrics
	loops    *evloop.Group
	deps     transport.Deps // what every listener is opened with (Reload opens more)
	hardStop context.Context

	// writeRoom is the budget's share for what the file outputs' writes
	// gather and stage, shared by their writers (Budget.WriteRoom).
	writeRoom *budget.Gate

	// outputs are the outputs in force, the main one first (config
	// OutputList order); Reload changes them under mu.
	outputs []*output
	// retiring are outputs a reload removed that may still be draining.
	retiring []*output

	// mu guards the listener set, which Reload changes while Run serves.
	mu        sync.Mutex
	listeners []*entry          // in configuration order
	leaving   map[string]*entry // removed by a reload, possibly still draining
	lctx      context.Context
	cancelAll context.CancelFunc // stops every listener (Run's stop, or one failed)
	active    int                // listeners whose Run has not returned
	allDone   chan struct{}      // closed when active drops to 0 in Run
	stopping  bool
	runErrs   []error

	forwarder *kafka.Forwarder
	otlpFwd   *otlpfwd.Forwarder
	control   *control.Server

	httpLn   net.Listener
	httpSrv  *http.Server
	scrapes  *scrapes // of /metrics, for lingerForScrape
	draining atomic.Bool
	// fds is the process's descriptors, which every accepting listener
	// reserves from before accept (transport.FDGate).
	fds *transport.FDGate

	inherited *transport.Inherited
	// sources are listeners the caller built itself (a captured child),
	// by the URL under which they appear in cfg.Listen.
	sources map[string]Source
}

// Source is a listener its owner builds itself rather than by URL (a
// captured child): the daemon gives it the listeners' Deps with Bind, then
// runs it like any listener.
type Source interface {
	transport.Listener
	Bind(d transport.Deps) error
}

// entry is one listener and the configuration URL it was opened from.
type entry struct {
	key    string // the listen URL as configured (Reload compares these)
	l      transport.Listener
	cancel context.CancelFunc // ends this listener alone (Reload removed it)
	done   chan struct{}      // closed once Run returned: its socket, path and lock are released
}

// Option adjusts what New builds.
type Option func(*Daemon)

// WithSource makes the listen URL s.URL() (which must be in the
// configuration's listen list) served by s instead of a listener opened
// by scheme.
func WithSource(s Source) Option {
	return func(d *Daemon) {
		if d.sources == nil {
			d.sources = map[string]Source{}
		}
		d.sources[s.URL()] = s
	}
}

// WithInherited gives the daemon the sockets a service manager passed
// (systemd socket activation). Each listener serves the one matching its
// URL (see transport.Inherited); one that no listener takes is a start-up
// error naming it. New takes ownership: whatever it does not hand to a
// listener is closed.
func WithInherited(in *transport.Inherited) Option {
	return func(d *Daemon) { d.inherited = in }
}

// New validates cfg, binds every listener and opens the output, so that
// every address and permission problem is reported before anything runs.
// hardStop is the context that bounds the shutdown drain.
func New(cfg config.Config, log *slog.Logger, hardStop context.Context, options ...Option) (*Daemon, error) {
	probe := &Daemon{}
	for _, o := range options {
		o(probe)
	}
	// Passed sockets no listener took are ours to close, whatever happens.
	defer probe.inherited.Close()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d := &Daemon{cfg: cfg, log: log, Registry: reg, Metrics: metrics.New(reg), inherited: probe.inherited,
		sources: probe.sources, leaving: map[string]*entry{}}

	d.hardStop = hardStop
	// Listeners first: they take their addresses' locks, so a second
	// instance of a running aggregator stops here, before it opens (and
	// repairs the tail of) an output file the first one is writing. The
	// sink routes nowhere until the outputs are open (nothing is read
	// before Run).
	nowhere := sink.NewRouting([]*sink.Output{sink.NewOutput(metrics.MainOutput, nil, true, nil)}, nil, nil)
	mode, _ := cfg.SocketMode()
	gid, _ := cfg.SocketGID()
	opts := transport.DefaultOptions()
	opts.MaxRecord = int(cfg.Limits.MaxRecord)
	opts.MaxConns = cfg.Limits.MaxConns
	opts.IdleTimeout = cfg.Limits.IdleTimeout
	opts.ReadCoalesce = cfg.Limits.ReadCoalesce
	d.budget = NewBudget(cfg)
	d.budget.Options(&opts)
	d.writeRoom = budget.NewGate(d.budget.WriteRoom)
	opts.SocketMode = mode
	opts.SocketGID = gid
	opts.RcvBuf = int(cfg.Sockets.RcvBuf)
	opts.TCPRcvBuf = int(cfg.Sockets.TCPRcvBuf)
	// One set of event loops and one budget for incomplete frames serve
	// every listener: threads and memory do not grow with listeners.
	loops, err := evloop.NewGroup(cfg.Limits.EventLoops)
	if err != nil {
		return nil, err
	}
	d.loops = loops
	partial := transport.NewByteBudget(opts.MaxPartialBytes)
	d.Metrics.Memory.SetBudget(d.budget.Map())
	// Connections get every descriptor the hard limit allows, but the
	// reserve: at the limit a listener stops accepting instead of
	// accepting what it cannot serve (ADR 0052).
	if err := raiseFDLimit(); err != nil {
		log.Warn("cannot raise the soft file descriptor limit to the hard one", "err", err)
	}
	if d.fds, err = transport.NewFDGate(transport.DefaultFDReserve); err != nil {
		loops.Close()
		return nil, fmt.Errorf("file descriptor limit: %w", err)
	}
	d.deps = transport.Deps{
		Sink:      sink.NewRouted(nowhere, sink.Options{HardStop: hardStop, BatchBytes: int(cfg.Queue.BatchBytes)}),
		Root:      d.Metrics,
		Opts:      opts,
		Loops:     loops,
		Partial:   partial,
		Conns:     budget.NewGate(d.budget.Conns),
		FDs:       d.fds,
		Inherited: d.inherited,
		StateDir:  cfg.StateDirectory(),
	}
	// Like systemd's StateDirectory=, the state directory is made if it
	// is missing (private to the aggregator's user), so a file or journal
	// input's first start does not fail on it.
	if err := os.MkdirAll(d.deps.StateDir, 0o700); err != nil {
		loops.Close()
		return nil, fmt.Errorf("state_dir: %w", err)
	}
	for _, raw := range cfg.Listen {
		l, err := d.open(raw)
		if err != nil {
			d.closeAll()
			return nil, err
		}
		d.listeners = append(d.listeners, &entry{key: raw, l: l})
	}
	if err := d.inherited.CheckAllTaken(); err != nil {
		d.closeAll()
		return nil, err
	}
	if kc := cfg.KafkaConfig(); kc != nil {
		// The forwarder is built first: retention must never delete a
		// segment it has not checkpointed past.
		kc.Log = log.With("forwarder", "kafka")
		fwd, err := kafka.New(*kc, reg)
		if err != nil {
			d.closeAll()
			return nil, fmt.Errorf("kafka forwarder: %w", err)
		}
		d.forwarder = fwd
	}
	if oc := cfg.OTLPConfig(); oc != nil {
		oc.Log = log.With("forwarder", "otlp")
		fwd, err := otlpfwd.New(*oc, reg)
		if err != nil {
			d.closeAll()
			return nil, fmt.Errorf("otlp forwarder: %w", err)
		}
		d.otlpFwd = fwd
	}
	if err := d.openOutputs(cfg); err != nil {
		d.closeAll()
		return nil, err
	}
	if cfg.Control != "" {
		srv, err := control.Listen(cfg.Control, d.deps.Sink, log.With("control", cfg.Control))
		if err != nil {
			d.closeAll()
			return nil, err
		}
		d.control = srv
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(d.budget.GoLimit)
	}
	log.Info("memory budget", d.budget.Attrs()...)

	if cfg.Metrics != "" {
		addr := MetricsListenAddr(cfg.Metrics)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			d.closeAll()
			return nil, fmt.Errorf("metrics listen %s: %w", addr, err)
		}
		metricsURL := "http://" + ln.Addr().String() + "/metrics"
		d.httpLn = newAdmitListener(ln, metricsURL, d.Metrics, log)
		d.scrapes = &scrapes{lost: d.lostTotal}
		mux := http.NewServeMux()
		mux.Handle("/metrics", d.scrapes.wrap(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})))
		if cfg.Pprof {
			// Only when asked for (--pprof): goroutine dumps and profiles
			// show internals to anyone who can connect, unauthenticated.
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			if d.draining.Load() {
				http.Error(w, "draining", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		d.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: metricsIdle}
	}
	d.checkFDs(cfg)
	return d, nil
}

// checkFDs warns when the descriptor limit, less the reserve, cannot hold
// --max-conns connections on every accepting listener: past it they stop
// accepting before their limit (clients wait in the backlog).
func (d *Daemon) checkFDs(cfg config.Config) {
	if cfg.Limits.MaxConns <= 0 {
		return
	}
	accepting := 0
	for _, raw := range cfg.Listen {
		if s, _, ok := strings.Cut(raw, "://"); ok && (s == "unix" || s == "tcp" || s == "shm") {
			accepting++
		}
	}
	d.fds.Recount() // the listeners and outputs are open now
	room := d.fds.Limit() - d.fds.Open() - d.fds.Reserve()
	if want := accepting * cfg.Limits.MaxConns; want > room {
		d.log.Warn("the file descriptor limit holds fewer connections than --max-conns allows: past it listeners stop accepting and clients wait in the listen backlog (raise the hard RLIMIT_NOFILE, e.g. LimitNOFILE= in the unit)",
			"connections", room, "max_conns_total", want, "fd_limit", d.fds.Limit(), "fds_reserved", d.fds.Reserve())
	}
}

// open opens the listener of one configured URL.
func (d *Daemon) open(raw string) (transport.Listener, error) {
	deps := d.deps
	deps.Log = d.log.With("listener", raw)
	if s, ok := d.sources[raw]; ok {
		deps.Metrics = d.Metrics.ForListener(raw)
		if err := s.Bind(deps); err != nil {
			return nil, fmt.Errorf("listen %s: %w", raw, err)
		}
		return s, nil
	}
	l, err := transport.Open(raw, deps)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", raw, err)
	}
	return l, nil
}

// MetricsListenAddr is the address --metrics binds: an empty host is the
// loopback, as for tcp:// and udp:// listeners, so ":9100" does not
// publish the metrics on every interface; "0.0.0.0:9100" still does.
func MetricsListenAddr(hostport string) string {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host != "" {
		return hostport
	}
	return net.JoinHostPort("127.0.0.1", port)
}

func (d *Daemon) closeAll() {
	for _, e := range d.listeners {
		e.l.Close()
	}
	if d.loops != nil {
		d.loops.Close()
	}
	for _, o := range d.outputs {
		o.close()
	}
	if d.httpLn != nil {
		d.httpLn.Close()
	}
	if d.control != nil {
		d.control.Close()
	}
}

// openOutputs opens every output of cfg and routes the sink to them by
// cfg's rules.
func (d *Daemon) openOutputs(cfg config.Config) error {
	set, err := cfg.CompileRules()
	if err != nil {
		return err
	}
	shipped := d.shippedOutput(cfg)
	for _, o := range cfg.OutputList() {
		var retain segment.Retainer
		var wake func()
		if d.forwarder != nil && o.Name == shipped {
			retain, wake = d.forwarder, d.forwarder.Wake
		}
		if d.otlpFwd != nil && o.Name == d.otlpOutput(cfg) {
			retain, wake = withForwarder(retain, wake, d.otlpFwd, d.otlpFwd.Wake)
		}
		out, err := d.openOutput(o, d.budget, retain, wake)
		if err != nil {
			return err
		}
		d.outputs = append(d.outputs, out)
		if retain != nil && !out.log.Regular() {
			return fmt.Errorf("forwarding reads output %s back, but %s is not a regular file", o.Name, o.Path)
		}
	}
	d.deps.Sink.Route(d.routing(set, d.outputs))
	return nil
}

// shippedOutput is the name of the output the Kafka forwarder ships ("" when
// none is forwarded).
func (d *Daemon) shippedOutput(cfg config.Config) string {
	if d.forwarder == nil {
		return ""
	}
	if n := cfg.Forward.Kafka.Output; n != "" {
		return n
	}
	return config.MainOutput
}

// otlpOutput is the name of the output the OTLP forwarder ships ("" when
// none is).
func (d *Daemon) otlpOutput(cfg config.Config) string {
	if d.otlpFwd == nil || cfg.Forward.OTLP == nil {
		return ""
	}
	if n := cfg.Forward.OTLP.Output; n != "" {
		return n
	}
	return config.MainOutput
}

// withForwarder adds a second forwarder of one output: a segment may go
// only once both shipped it, and a write wakes both.
func withForwarder(retain segment.Retainer, wake func(), r segment.Retainer, w func()) (segment.Retainer, func()) {
	if retain == nil {
		return r, w
	}
	return bothRetain{retain, r}, func() { wake(); w() }
}

type bothRetain [2]segment.Retainer

func (b bothRetain) MayDelete(seq uint64) bool { return b[0].MayDelete(seq) && b[1].MayDelete(seq) }

func (d *Daemon) routing(set *rules.Set, outs []*output) *sink.Routing {
	so := make([]*sink.Output, len(outs))
	for i, o := range outs {
		so[i] = o.sink
	}
	return sink.NewRouting(so, set, d.Metrics)
}

// ListenURLs are the bound listeners' URLs (with real ports for :0).
func (d *Daemon) ListenURLs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, len(d.listeners))
	for i, e := range d.listeners {
		out[i] = e.l.URL()
	}
	return out
}

// MetricsAddr is the bound metrics address, or "".
func (d *Daemon) MetricsAddr() string {
	if d.httpLn == nil {
		return ""
	}
	return d.httpLn.Addr().String()
}

// Written is the number of records written to the outputs so far (a record
// routed to two outputs counts twice).
func (d *Daemon) Written() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var n int64
	for _, o := range d.outputs {
		if o.writer != nil {
			n += o.writer.Written()
		}
	}
	return n
}

// QueueDepth is the number of batches waiting for the fullest output's
// writer, and the capacity of a queue in full batches (a queue is bounded
// in bytes: small batches take less).
func (d *Daemon) QueueDepth() (depth, capacity int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, o := range d.outputs {
		if o.queue != nil {
			depth = max(depth, o.queue.Len())
			capacity = max(capacity, int(o.queue.Limit()/int64(d.cfg.Queue.BatchBytes)))
		}
	}
	return depth, capacity
}

// Reopen reopens every output file (SIGHUP).
func (d *Daemon) Reopen(ctx context.Context) error {
	d.mu.Lock()
	outs := append([]*output(nil), d.outputs...)
	d.mu.Unlock()
	var errs []error
	for _, o := range outs {
		if o.writer != nil {
			errs = append(errs, o.writer.Reopen(ctx))
		}
	}
	return errors.Join(errs...)
}

// ErrStopping is returned by Reload once the daemon is shutting down.
var ErrStopping = errors.New("daemon is stopping")

// Reload applies a new configuration to the running daemon (SIGHUP):
//
//   - listen URLs present before and after keep their sockets and
//     connections; new ones are opened and started; removed ones stop
//     accepting, drain what they hold into the queue and close, as at
//     shutdown;
//   - outputs and rules change together (reloadOutputs): an output kept by
//     name changes its settings in place between two writes and is
//     reopened even when they did not change (logrotate); a new one opens;
//     a removed one writes what was routed to it and closes; the rules
//     apply to the next record of every listener;
//   - everything else (limits, sockets, queue, metrics, forwarding, log
//     level, drain timeout) keeps its running value until a restart; the
//     changed keys are logged.
//
// Nothing changes unless all of it can: an invalid configuration, a new
// listener that cannot be opened or an output that cannot be opened leaves
// the daemon as it was, and the error says why. It must not be called
// before Run, and it returns ErrStopping once Run is stopping. Reloads
// are serialized.
func (d *Daemon) Reload(ctx context.Context, cfg config.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lctx == nil || d.stopping {
		return ErrStopping
	}
	want := map[string]bool{}
	for _, raw := range cfg.Listen {
		want[raw] = true
	}
	have := map[string]*entry{}
	for _, e := range d.listeners {
		have[e.key] = e
	}
	// Open every new listener before anything changes: one that fails
	// leaves the running set untouched. A listener moving between two
	// spellings of one address (its old socket still bound) fails here
	// too; that takes a restart.
	var added []*entry
	closeAdded := func() {
		for _, e := range added {
			e.l.Close()
		}
	}
	for _, raw := range cfg.Listen {
		if have[raw] != nil {
			continue
		}
		// A listener an earlier reload removed may still be draining,
		// holding its address: the new one opens once it let go.
		if e := d.leaving[raw]; e != nil {
			select {
			case <-e.done:
			case <-ctx.Done():
				closeAdded()
				return fmt.Errorf("listen %s: the listener removed by an earlier reload is still draining: %w", raw, ctx.Err())
			}
		}
		l, err := d.open(raw)
		if err != nil {
			closeAdded()
			return err
		}
		added = append(added, &entry{key: raw, l: l})
	}
	if err := d.reloadOutputs(ctx, cfg); err != nil {
		closeAdded()
		return err
	}

	next := make([]*entry, 0, len(cfg.Listen))
	byKey := map[string]*entry{}
	for _, e := range added {
		byKey[e.key] = e
	}
	for _, raw := range cfg.Listen {
		if e := have[raw]; e != nil {
			next = append(next, e)
		} else {
			e := byKey[raw]
			d.startLocked(e)
			next = append(next, e)
			d.log.Info("reload: listening", "listener", e.l.URL())
		}
	}
	for _, e := range d.listeners {
		if !want[e.key] {
			e.cancel() // it drains into the queue and closes on its own
			d.leaving[e.key] = e
			d.log.Info("reload: stopped listening", "listener", e.l.URL())
		}
	}
	for key, e := range d.leaving {
		select {
		case <-e.done:
			delete(d.leaving, key)
		default:
		}
	}
	d.listeners = next
	d.cfg.Listen = append([]string(nil), cfg.Listen...)
	if keys := restartOnly(d.cfg, cfg); len(keys) > 0 {
		d.log.Warn("reload: these settings keep their running values until a restart", "keys", strings.Join(keys, ","))
	}
	return nil
}

// restartOnly names the top-level keys that differ between the running
// and the new configuration but that Reload does not apply.
func restartOnly(run, next config.Config) []string {
	var keys []string
	diff := func(name string, a, b any) {
		if fmt.Sprintf("%+v", a) != fmt.Sprintf("%+v", b) {
			keys = append(keys, name)
		}
	}
	diff("limits", run.Limits, next.Limits)
	diff("sockets", run.Sockets, next.Sockets)
	diff("queue", run.Queue, next.Queue)
	diff("metrics", run.Metrics, next.Metrics)
	diff("pprof", run.Pprof, next.Pprof)
	diff("control", run.Control, next.Control)
	diff("drain_timeout", run.DrainTimeout, next.DrainTimeout)
	diff("log_level", run.LogLevel, next.LogLevel)
	kafka := func(c config.Config) any {
		if k := c.KafkaConfig(); k != nil {
			return *k
		}
		return nil
	}
	diff("forward", kafka(run), kafka(next))
	otlp := func(c config.Config) any {
		if o := c.OTLPConfig(); o != nil {
			return *o
		}
		return nil
	}
	diff("forward.otlp", otlp(run), otlp(next))
	return keys
}

// Run serves until stop ends, then drains within hardStop (the same context
// given to New) and returns. It returns an error if a listener failed.
func (d *Daemon) Run(stop, hardStop context.Context) error {
	// Count what New opened (listeners, outputs): the gate's estimate
	// starts right.
	d.fds.Recount()
	if d.httpSrv != nil {
		go func() {
			if err := d.httpSrv.Serve(d.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				d.log.Error("metrics server", "err", err)
			}
		}()
	}
	d.mu.Lock()
	for _, o := range d.outputs {
		o.start(hardStop)
	}
	d.mu.Unlock()
	ctlCtx, stopControl := context.WithCancel(context.Background())
	ctlDone := make(chan struct{})
	if d.control != nil {
		go func() { d.control.Run(ctlCtx); close(ctlDone) }()
	} else {
		close(ctlDone)
	}
	defer func() { stopControl(); <-ctlDone }()
	// The forwarder outlives the writers: it stops only after the last
	// batch is in the file, then flushes within its own drain timeout.
	fwdCtx, stopForwarder := context.WithCancel(context.Background())
	defer stopForwarder()
	fwdDone := make(chan error, 1)
	if d.forwarder != nil {
		go func() { fwdDone <- d.forwarder.Run(fwdCtx) }()
	} else {
		fwdDone <- nil
	}
	otlpDone := make(chan error, 1)
	if d.otlpFwd != nil {
		go func() { otlpDone <- d.otlpFwd.Run(fwdCtx) }()
	} else {
		otlpDone <- nil
	}

	// A listener that fails stops the others: better to exit and be
	// restarted by the supervisor than to run half-deaf.
	lctx, cancelListeners := context.WithCancel(stop)
	defer cancelListeners()
	allReady := make(chan struct{})
	d.mu.Lock()
	d.lctx, d.cancelAll, d.allDone = lctx, cancelListeners, allReady
	for _, e := range d.listeners {
		d.startLocked(e)
	}
	if d.active == 0 {
		close(allReady)
	}
	d.mu.Unlock()
	context.AfterFunc(lctx, func() {
		d.mu.Lock()
		d.stopping = true // Reload opens nothing more
		d.mu.Unlock()
	})
	// Start-up is over: what it touched of the executable need not stay
	// resident, nor what a metrics scrape or a reload touched later
	// (trimCode; docs/memory.md).
	trimDone := make(chan struct{})
	go func() { d.trimCode(lctx); close(trimDone) }()
	defer func() {
		// lctx ends here when every listener ended by itself (stdin at
		// EOF, `aggregator run`'s command): the deferred cancel above
		// would run only after this wait.
		cancelListeners()
		<-trimDone
	}()

	select {
	case <-allReady:
	case <-lctx.Done():
		d.draining.Store(true)
		select {
		case <-allReady:
		case <-hardStop.Done():
			// Listeners that are still stuck lose what they hold; give them
			// a moment to hand over what they already read.
			select {
			case <-allReady:
			case <-time.After(time.Second):
				d.log.Warn("drain deadline passed with listeners still draining")
			}
		}
	}
	d.draining.Store(true)
	select {
	case <-allReady: // every listener removed its connections: the loops can stop
		d.loops.Close()
	default: // a listener is stuck past the deadline; the process is about to exit
	}
	d.mu.Lock()
	outs := append(append([]*output(nil), d.outputs...), d.retiring...)
	d.mu.Unlock()
	var werrs []error
	for _, o := range outs {
		werrs = append(werrs, o.stop())
	}
	stopForwarder()
	ferr := errors.Join(<-fwdDone, <-otlpDone)
	// The endpoint served through the drain; the final counts are in.
	d.logFinalCounts()
	if d.httpSrv != nil {
		d.lingerForScrape()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		d.httpSrv.Shutdown(sctx)
		cancel()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return errors.Join(append(append(d.runErrs, werrs...), ferr)...)
}

// startLocked runs e's listener in its own goroutine, under a context of
// its own so that Reload can stop it alone. d.mu must be held.
func (d *Daemon) startLocked(e *entry) {
	ctx, cancel := context.WithCancel(d.lctx)
	e.cancel, e.done = cancel, make(chan struct{})
	d.active++
	go func() {
		err := e.l.Run(ctx)
		cancel()
		close(e.done) // before d.mu: Reload may wait for it holding d.mu
		d.mu.Lock()
		defer d.mu.Unlock()
		if err != nil {
			d.runErrs = append(d.runErrs, fmt.Errorf("%s: %w", e.l.URL(), err))
			d.cancelAll()
		}
		d.active--
		if d.active == 0 {
			// Every listener returned: on their own (stdin:// at EOF, a
			// captured child's exit) or at the stop. Reload starts no
			// more once this happened.
			d.stopping = true
			close(d.allDone)
		}
	}()
}

// Lost is what the daemon accepted and never wrote against the operator's
// will, by cause: write_error (an output could not be written by the drain
// deadline), drain_timeout (still on its way to a writer at the deadline)
// and output_full (an output that drops when full was full). Records in
// minus records out over all listeners equals the sum, plus what rules
// dropped on purpose. Each record counts once, for the output it went to
// first. Read it after Run returned.
func (d *Daemon) Lost() map[string]pipeline.Loss {
	lost := d.deps.Sink.Lost()
	add := func(cause string, l pipeline.Loss) {
		t := lost[cause]
		t.Add(l)
		lost[cause] = t
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, o := range append(append([]*output(nil), d.outputs...), d.retiring...) {
		if o.writer != nil {
			add(metrics.CauseWriteError, o.writer.Lost())
			add(metrics.CauseDrainTimeout, o.queue.Lost())
		}
	}
	return lost
}

// logFinalCounts logs each listener's counters once at exit, so what went
// in, out and where the rest went is on record after the metrics endpoint
// is gone.
func (d *Daemon) logFinalCounts() {
	fams, err := d.Registry.Gather()
	if err != nil {
		d.log.Warn("final counts", "err", err)
		return
	}
	type counts struct {
		in, out, bytesIn, bytesOut int64
		dropped                    []string
	}
	per := map[string]*counts{}
	var names []string
	get := func(l string) *counts {
		if per[l] == nil {
			per[l] = &counts{}
			names = append(names, l)
		}
		return per[l]
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var listener, cause string
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "listener":
					listener = lp.GetValue()
				case "cause":
					cause = lp.GetValue()
				}
			}
			if listener == "" || m.GetCounter() == nil {
				continue
			}
			switch f.GetName() {
			case "logagg_records_in_total", "logagg_records_out_total", "logagg_bytes_in_total", "logagg_bytes_out_total", "logagg_dropped_total":
			default:
				continue // not counts of records (the metrics endpoint's pauses have a listener label too)
			}
			v := int64(m.GetCounter().GetValue())
			c := get(listener)
			switch f.GetName() {
			case "logagg_records_in_total":
				c.in = v
			case "logagg_records_out_total":
				c.out = v
			case "logagg_bytes_in_total":
				c.bytesIn = v
			case "logagg_bytes_out_total":
				c.bytesOut = v
			case "logagg_dropped_total":
				if v > 0 {
					c.dropped = append(c.dropped, fmt.Sprintf("%s=%d", cause, v))
				}
			}
		}
	}
	sort.Strings(names)
	for _, l := range names {
		c := per[l]
		d.log.Info("final counts", "listener", l, "records_in", c.in, "records_out", c.out,
			"bytes_in", c.bytesIn, "bytes_out", c.bytesOut, "dropped", strings.Join(c.dropped, ","))
	}
}
