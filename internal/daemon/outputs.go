package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ipclab/logagg/internal/config"
	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/segment"
	"github.com/ipclab/logagg/internal/sink"
)

// output is one configured output while it runs: what the sink sends to,
// and for a file output its queue, the writer that drains it into the
// segment log, and the log. Each output has its own writer goroutine, so
// a full disk or a slow device behind one does not stop the others
// (unless the output blocks when full: then it holds the producers back).
type output struct {
	cfg     config.NamedOutput
	segOpts segment.Options
	sink    *sink.Output
	m       *metrics.Writer
	queue   *pipeline.Queue  // nil for a discard output
	writer  *pipeline.Writer // nil for a discard output
	log     *segment.Log     // nil for a discard output
	done    chan error       // the writer's Run result, once it returned
	started bool

	stopOnce sync.Once // a retired output may be stopped by retire and by Run's end
	stopErr  error
}

// openOutput opens o's file and builds its queue and writer, sized by b;
// retain keeps segments a forwarder has not shipped (nil: none), wake is
// told after each write (nil: nobody).
func (d *Daemon) openOutput(o config.NamedOutput, b Budget, retain segment.Retainer, wake func()) (*output, error) {
	out := &output{cfg: o, m: d.Metrics.ForOutput(o.Name), done: make(chan error, 1)}
	out.sink = sink.NewOutput(o.Name, nil, o.Block, out.m)
	if o.Type == config.OutputDiscard {
		return out, nil
	}
	out.segOpts = segmentOptions(o.Output)
	out.segOpts.Retainer = retain
	log, err := segment.Open(out.segOpts, out.m)
	if err != nil {
		return nil, fmt.Errorf("output %s: %w", o.Name, err)
	}
	if on, err := log.DirectIO(); o.DirectIO && !on {
		d.log.Warn("direct I/O refused; writing through the page cache", "output", o.Path, "err", err)
	}
	out.log = log
	out.queue = pipeline.NewQueueBytes(b.Queue, int(d.cfg.Queue.BatchBytes), out.m)
	out.queue.KeepRecord(int(d.cfg.Limits.MaxRecord))
	var w pipeline.Output = log
	if wake != nil {
		w = wakingOutput{Log: log, wake: wake}
	}
	out.writer = pipeline.NewWriter(out.queue, w, out.m, d.log.With("output", o.Name), int(b.WriteMax))
	out.writer.ShareRoom(d.writeRoom, int(b.Write))
	out.sink.Queue = out.queue
	return out, nil
}

// start runs the writer until Close, or the hard stop.
func (o *output) start(hardStop context.Context) {
	if o.writer == nil || o.started {
		return
	}
	o.started = true
	go func() { o.done <- o.writer.Run(hardStop) }()
}

// stop ends the writer once everything queued is written (or the hard
// stop came), counts what is left queued as dropped, and closes the file.
func (o *output) stop() error {
	if o.writer == nil {
		return nil
	}
	o.stopOnce.Do(func() {
		var werr error
		if o.started {
			o.writer.Close()
			werr = <-o.done
		}
		// A listener that handed over a batch after the writer's last
		// look (both racing the hard stop) leaves it queued: it is lost,
		// counted.
		o.queue.DropQueued()
		o.stopErr = errors.Join(werr, o.log.Close())
	})
	return o.stopErr
}

// close releases an output that never ran (a start-up or reload failed).
func (o *output) close() {
	if o.log != nil {
		o.log.Close()
	}
}

// retire stops an output a reload removed: once no Emitter holds a batch
// for it (they hand over at the end of every read), what was routed to
// it is in its queue; the writer writes that and the output closes. It
// runs in its own goroutine: the reload does not wait.
func (o *output) retire(log *slog.Logger, m *metrics.Metrics, deadline time.Duration) {
	t := time.Now().Add(deadline)
	for !o.sink.Idle() && time.Now().Before(t) {
		time.Sleep(10 * time.Millisecond) // polls a counter that emitters release within a read
	}
	if err := o.stop(); err != nil {
		log.Error("removed output", "output", o.cfg.Name, "err", err)
	}
	m.ForgetOutput(o.cfg.Name)
	log.Info("reload: output closed", "output", o.cfg.Name)
}

// segmentOptions are an output's settings (Retainer set by the caller).
func segmentOptions(o config.Output) segment.Options {
	fsync, _ := segment.ParseFsync(o.Fsync) // validated
	return segment.Options{
		Path:     o.Path,
		MaxSize:  int64(o.MaxSize),
		MaxFiles: o.MaxFiles,
		MaxDisk:  int64(o.MaxDisk),
		Fsync:    fsync,
		DirectIO: o.DirectIO,
	}
}

// wakingOutput tells the forwarder about new data right after each write,
// so it does not wait for its poll interval.
type wakingOutput struct {
	*segment.Log
	wake func()
}

func (w wakingOutput) WriteBuffers(bufs [][]byte) (int64, error) {
	n, err := w.Log.WriteBuffers(bufs)
	if n > 0 {
		w.wake()
	}
	return n, err
}

// reloadOutputs puts cfg's outputs and rules in force, all or nothing:
// new outputs are opened and kept ones reconfigured first (a failure
// closes the new ones and reverts the reconfigured ones), then the sink
// routes by the new rules at once, then removed outputs are retired.
// d.mu is held.
func (d *Daemon) reloadOutputs(ctx context.Context, cfg config.Config) error {
	set, err := cfg.CompileRules()
	if err != nil {
		return err
	}
	have := map[string]*output{}
	for _, o := range d.outputs {
		have[o.cfg.Name] = o
	}
	if name := d.shippedOutput(d.cfg); name != "" {
		if o := have[name]; o != nil && o.log != nil {
			next, ok := outputNamed(cfg, name)
			if !ok || next.Type == config.OutputDiscard || next.Path != o.cfg.Path || d.shippedOutput(cfg) != name {
				return &config.FieldError{Field: "output.path", Err: fmt.Errorf("output %s (%s) is what the Kafka forwarder reads: it cannot move, go or change while forwarding (restart to change it)", name, o.cfg.Path)}
			}
		}
	}
	if name := d.otlpOutput(d.cfg); name != "" {
		if o := have[name]; o != nil && o.log != nil {
			next, ok := outputNamed(cfg, name)
			if !ok || next.Type == config.OutputDiscard || next.Path != o.cfg.Path || d.otlpOutput(cfg) != name {
				return &config.FieldError{Field: "output.path", Err: fmt.Errorf("output %s (%s) is what the OTLP forwarder reads: it cannot move, go or change while forwarding (restart to change it)", name, o.cfg.Path)}
			}
		}
	}
	type change struct {
		o        *output
		old, new segment.Options
	}
	var opened []*output
	var changed []change
	undo := func() {
		for i := len(changed) - 1; i >= 0; i-- {
			c := changed[i]
			if err := c.o.writer.Apply(ctx, func() error { return c.o.log.Reconfigure(c.old) }); err != nil {
				d.log.Error("reload: could not restore an output's settings", "output", c.o.cfg.Name, "err", err)
			}
		}
		for _, o := range opened {
			o.close()
		}
	}
	// New outputs take the share of the budget that the new list of
	// outputs leaves each (limits.memory itself keeps its running value).
	split := d.cfg
	split.Output, split.Outputs = cfg.Output, cfg.Outputs
	nb := NewBudget(split)
	next := make([]*output, 0, len(cfg.OutputList()))
	for _, nc := range cfg.OutputList() {
		o := have[nc.Name]
		if o != nil && (o.log == nil) == (nc.Type == config.OutputDiscard) {
			if o.log != nil {
				opts := segmentOptions(nc.Output)
				opts.Retainer = o.segOpts.Retainer
				if err := o.writer.Apply(ctx, func() error { return o.log.Reconfigure(opts) }); err != nil {
					undo()
					return fmt.Errorf("output %s: %w", nc.Name, err)
				}
				changed = append(changed, change{o, o.segOpts, opts})
			}
			next = append(next, o)
			continue
		}
		n, err := d.openOutput(nc, nb, nil, nil)
		if err != nil {
			undo()
			return err
		}
		opened = append(opened, n)
		next = append(next, n)
	}
	// Everything opened: from here on nothing fails.
	for _, c := range changed {
		c.o.segOpts = c.new
	}
	kept := map[*output]bool{}
	for i, o := range next {
		o.cfg = cfg.OutputList()[i]
		o.sink.SetBlock(o.cfg.Block)
		o.start(d.hardStop)
		kept[o] = true
	}
	d.deps.Sink.Route(d.routing(set, next))
	for _, o := range d.outputs {
		if !kept[o] {
			d.log.Info("reload: output removed; it writes what was routed to it, then closes", "output", o.cfg.Name)
			d.retiring = append(d.retiring, o)
			go o.retire(d.log, d.Metrics, d.cfg.DrainTimeout)
		}
	}
	for _, o := range opened {
		d.log.Info("reload: output opened", "output", o.cfg.Name, "path", o.cfg.Path)
	}
	d.outputs = next
	d.cfg.Output, d.cfg.Outputs, d.cfg.Rules, d.cfg.Unrouted = cfg.Output, cfg.Outputs, cfg.Rules, cfg.Unrouted
	d.budget.Queue, d.budget.Write, d.budget.FileOutputs = nb.Queue, nb.Write, nb.FileOutputs
	d.budget.WriteMax, d.budget.WriteRoom = nb.WriteMax, nb.WriteRoom
	d.Metrics.Memory.SetBudget(d.budget.Map())
	return nil
}

func outputNamed(cfg config.Config, name string) (config.NamedOutput, bool) {
	for _, o := range cfg.OutputList() {
		if o.Name == name {
			return o, true
		}
	}
	return config.NamedOutput{}, false
}
