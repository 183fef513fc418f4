// Package sink is the one place every record passes through on its way from
// a listener to the outputs: it encodes the record (package record), counts
// it, applies the routing rules (package rules: which outputs, dropped,
// rate-limited, edited), collects records into one batch per output, hands
// batches to each output's queue with backpressure (or, for an output that
// drops when full, without waiting), and counts, in records and bytes,
// whatever it does not deliver, with a cause.
//
// Every input (stream and datagram sockets, FIFOs, stdin, a captured
// child's output, shared-memory rings, POSIX queues, and any input added
// later) hands its records to an Emitter and nothing else: a rule, a field
// or a counter that must apply to every record is written here once.
//
// # Lifetimes and concurrency
//
// A Sink is shared by all listeners of a daemon and is safe for concurrent
// use; Route swaps its outputs and rules at once (a reload). An Emitter
// belongs to one goroutine (a listener's reader, or one event loop for the
// listener's connections on it); each has its own encoder and batches, so
// the hot path takes no lock.
//
// # Accounting
//
// records_in_total counts every record handed to Emit, and bytes_in_total
// every byte a source reports with Received. A record counts for its
// listener once: it reaches its first output (records_out_total, counted
// by that output's writer) or is dropped with a cause (dropped_total and
// dropped_bytes_total, with the bytes of its payload): records in =
// records out + dropped. Copies of a record routed to further outputs
// count in those outputs' own metrics only. Once the hard stop has ended a
// hand-over, the Emitter stops encoding: each later record is counted
// dropped (drain_timeout) as it arrives, so a source can keep draining its
// input without anything it read going uncounted.
package sink

import (
	"context"
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/ipclab/logagg/internal/framing"
	"github.com/ipclab/logagg/internal/jsonstr"
	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/rules"
)

// DefaultBatchBytes is the batch size when Options.BatchBytes is 0.
const DefaultBatchBytes = 64 << 10

// Options configure a Sink.
type Options struct {
	// HardStop ends when the drain must give up (nil: never). A full
	// queue holds an Emitter at most until then.
	HardStop context.Context
	// BatchBytes is the size at which an Emitter hands a batch over
	// (0: DefaultBatchBytes).
	BatchBytes int
}

// Output is one place records go: a queue its writer drains, or nowhere
// (a discard output).
type Output struct {
	Name string
	// Queue takes the output's batches; nil makes a discard output, whose
	// records are counted and dropped.
	Queue pipeline.Submitter
	// Metrics count what the output drops (may be nil).
	Metrics *metrics.Writer

	drop    atomic.Bool  // when the queue is full, drop instead of waiting (SetBlock)
	held    atomic.Int64 // batches Emitters are filling for it
	retired atomic.Bool  // a reload removed it: no new batch is started for it
}

// NewOutput returns an output sending to queue (nil: a discard output);
// block says whether it waits when the queue is full (SetBlock).
func NewOutput(name string, queue pipeline.Submitter, block bool, m *metrics.Writer) *Output {
	o := &Output{Name: name, Queue: queue, Metrics: m}
	o.SetBlock(block)
	return o
}

// SetBlock says what happens when the queue is full: wait for room
// (backpressure: producers are held back), or drop the batch, counted
// (output_full), so that one stuck output does not stop the others. A
// batch that carries completions (acknowledged producers, shm rings)
// always waits: its producer was promised the records are written. The
// queue must implement TrySubmit to drop. Safe while Emitters use o.
func (o *Output) SetBlock(block bool) { o.drop.Store(!block) }

// Idle reports whether no Emitter holds a batch for the output: once a
// retired output is idle, everything routed to it is in its queue.
func (o *Output) Idle() bool { return o.held.Load() == 0 }

type trySubmitter interface {
	TrySubmit(b *pipeline.Batch) bool
}

// Routing is the outputs and the rules in force. Build it with NewRouting
// and never change it: a reload builds another and calls Sink.Route.
type Routing struct {
	Outputs []*Output
	Rules   *rules.Set // nil: every record goes to Outputs[0]
	// direct is the index of the output every record goes to when there
	// are no rules, or -1 (then every record goes through the rules).
	direct  int
	discard bool // no rules, and what is unrouted is discarded
	rules   []ruleCounters
}

type ruleCounters struct{ matched, dropped, suppressed metricsCounter }

// metricsCounter is the part of a Prometheus counter the sink uses.
type metricsCounter interface{ Add(float64) }

// NewRouting binds a rule set to its outputs (set.Outputs[i] is
// outputs[i]); m receives the per-rule counters (nil: none).
func NewRouting(outputs []*Output, set *rules.Set, m *metrics.Metrics) *Routing {
	r := &Routing{Outputs: outputs, Rules: set, direct: -1}
	if set == nil {
		r.direct = 0
		return r
	}
	if len(set.Rules) == 0 {
		switch u := set.Unrouted; {
		case u == 0:
			r.discard = true
		case u&(u-1) == 0 && outputs[bits.TrailingZeros64(u)].Queue != nil:
			r.direct = bits.TrailingZeros64(u)
		}
	}
	for _, rule := range set.Rules {
		var c ruleCounters
		if m != nil {
			c = ruleCounters{m.RuleMatched.WithLabelValues(rule.Name), m.RuleDropped.WithLabelValues(rule.Name),
				m.RuleSuppressed.WithLabelValues(rule.Name)}
		} else {
			c = ruleCounters{nopCounter{}, nopCounter{}, nopCounter{}}
		}
		r.rules = append(r.rules, c)
	}
	return r
}

type nopCounter struct{}

func (nopCounter) Add(float64) {}

// Sink is where every listener of a daemon sends its records.
type Sink struct {
	routing    atomic.Pointer[Routing]
	hardStop   context.Context
	batchBytes int

	// lost totals what every Emitter gave up involuntarily, for the exit
	// summary (Lost): at the hard stop, and to a full output that drops.
	lostMu sync.Mutex
	lost   map[string]pipeline.Loss

	// taps are the records' watchers (aggregator tap); nil, the usual
	// case, costs one atomic load per record.
	taps  atomic.Pointer[[]*Tap]
	tapMu sync.Mutex
}

// New returns a Sink that sends every record to out, waiting when it is
// full.
func New(out pipeline.Submitter, o Options) *Sink {
	return NewRouted(NewRouting([]*Output{NewOutput(metrics.MainOutput, out, true, nil)}, nil, nil), o)
}

// NewRouted returns a Sink that routes by r.
func NewRouted(r *Routing, o Options) *Sink {
	if o.HardStop == nil {
		o.HardStop = context.Background()
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = DefaultBatchBytes
	}
	s := &Sink{hardStop: o.HardStop, batchBytes: o.BatchBytes, lost: map[string]pipeline.Loss{}}
	s.routing.Store(r)
	return s
}

// Route puts r in force. Emitters hand over what they collected under the
// old routing, to the old outputs, before they route a record by r. It
// returns the old outputs r does not have, marked retired: once each is
// Idle, nothing more will be submitted to its queue.
func (s *Sink) Route(r *Routing) (retired []*Output) {
	old := s.routing.Swap(r)
	keep := map[*Output]bool{}
	for _, o := range r.Outputs {
		keep[o] = true
	}
	for _, o := range old.Outputs {
		if !keep[o] {
			o.retired.Store(true)
			retired = append(retired, o)
		}
	}
	return retired
}

// Routing is the routing in force.
func (s *Sink) Routing() *Routing { return s.routing.Load() }

// HardStop is the context that ends when the drain must give up; sources
// that drain their input on shutdown stop there.
func (s *Sink) HardStop() context.Context { return s.hardStop }

// BatchBytes is the size at which an Emitter hands a batch over.
func (s *Sink) BatchBytes() int { return s.batchBytes }

// Lost is what the sink's Emitters gave up involuntarily so far, by cause
// (drain_timeout, output_full), in records and received bytes; records
// counted once, for the output they went to first.
func (s *Sink) Lost() map[string]pipeline.Loss {
	s.lostMu.Lock()
	defer s.lostMu.Unlock()
	out := make(map[string]pipeline.Loss, len(s.lost))
	for k, v := range s.lost {
		out[k] = v
	}
	return out
}

func (s *Sink) addLost(cause string, records, bytes int) {
	s.lostMu.Lock()
	l := s.lost[cause]
	l.Add(pipeline.Loss{Records: int64(records), Bytes: int64(bytes)})
	s.lost[cause] = l
	s.lostMu.Unlock()
}

// Emitter returns a new Emitter counting into m (nil: counts nowhere).
// It belongs to the calling goroutine.
func (s *Sink) Emitter(m *metrics.Listener) *Emitter {
	e := &Emitter{s: s, m: m, enc: record.NewEncoder()}
	e.messageFn = e.messageRecord
	e.use(s.routing.Load())
	return e
}

// Emitter encodes one goroutine's records into batches. Not safe for
// concurrent use.
type Emitter struct {
	s   *Sink
	m   *metrics.Listener
	enc *record.Encoder

	r    *Routing   // the routing the batches are filled under
	outs []outState // per output of r
	full bool       // a batch reached the batch size: hand over before the next record
	// since counts the records emitted (whatever became of them) since
	// the last hand-over: Done covers them.
	since int

	tally Tally
	err   error // a Submit failed at the hard stop: records are dropped from now on

	// Completions of the records emitted since the last hand-over (Done),
	// and the joints of earlier hand-overs not yet written everywhere.
	pending []pipeline.Completion
	joints  jointQueue

	// The rules' working space.
	rec    rules.Record // what the rules see of the record being routed
	line   []byte       // the encoded record
	notice []byte       // a rate-limit notice, as payload and encoded
	sc     rules.Scratch
	eb     rules.EditBuf
	// tapScratch evaluates the taps' matches.
	tapScratch rules.Scratch

	// messageFn is messageRecord bound once, so Message does not allocate
	// a closure per message; msgMeta is the meta it encodes with.
	messageFn func(rec []byte, flags record.Flags)
	msgMeta   *record.Meta
}

// outState is what an Emitter collects for one output: a batch of the
// records whose first output it is (they count for the listener), and a
// batch of copies of records that went to an earlier output first.
type outState struct {
	first, copies     *pipeline.Batch
	firstIn, copiesIn int // payload bytes of the records in each
	discarded         int // records routed to a discard output, and their bytes
	discardedBytes    int
}

// use starts filling batches under r (the old routing's batches were
// handed over; its rules' counts are added to its counters first).
func (e *Emitter) use(r *Routing) {
	e.takeRuleCounts()
	e.r = r
	if cap(e.outs) < len(r.Outputs) {
		e.outs = make([]outState, len(r.Outputs))
	}
	e.outs = e.outs[:len(r.Outputs)]
	clear(e.outs)
}

// Received counts n bytes read from the source (payload and framing).
func (e *Emitter) Received(n int) { e.tally.Bytes += n }

// Emit encodes one record (framing removed) with meta and the flags the
// framer raised, and routes it. It reports false once the hard stop has
// been reached: the record was counted as dropped instead. Full batches
// are handed over before the record is added, so a completion given to
// Done after Emit rides with the batches that hold the record.
func (e *Emitter) Emit(payload []byte, meta *record.Meta, flags record.Flags) bool {
	if r := e.s.routing.Load(); r != e.r || e.full {
		if e.err == nil {
			e.flush()
		}
		if r != e.r {
			e.use(r)
		}
	}
	if e.err != nil {
		e.tally.Records++
		e.tally.drop(dropDrainTimeout, 1, len(payload))
		return false
	}
	e.since++
	if e.r.direct >= 0 {
		st := &e.outs[e.r.direct]
		b := e.batchFor(e.r.direct, true)
		if b == nil {
			return e.Emit(payload, meta, flags) // retired under our feet: route again
		}
		var res record.Result
		start := len(b.Buf)
		b.Buf, res = e.enc.Append(b.Buf, payload, meta, flags)
		b.Records++
		st.firstIn += len(payload)
		e.tally.Add(res)
		if len(b.Buf) >= e.s.batchBytes {
			e.full = true
		}
		if taps := e.s.taps.Load(); taps != nil {
			e.rec = rules.Record{Payload: payload, Result: res, Fields: e.enc.Fields(), Meta: meta}
			e.tap(*taps, b.Buf[start:], &e.rec)
		}
		return true
	}
	var res record.Result
	e.line, res = e.enc.Append(e.line[:0], payload, meta, flags)
	e.tally.Add(res)
	e.rec = rules.Record{Payload: payload, Result: res, Fields: e.enc.Fields(), Meta: meta}
	for !e.route(len(payload)) {
		// An output was retired meanwhile and the routing switched: route
		// the record again by the new one.
	}
	return true
}

// route decides where the encoded record (e.line, e.rec) goes and delivers
// it; false means an output was retired meanwhile (nothing was delivered).
func (e *Emitter) route(inBytes int) bool {
	switch {
	case e.r.direct >= 0:
		return e.deliver(e.line, 1<<e.r.direct, inBytes)
	case e.r.discard:
		e.tally.drop(dropUnrouted, 1, inBytes)
		return true
	}
	d := e.r.Rules.Eval(&e.rec, &e.sc)
	for i := range d.Notices {
		e.emitNotice(&d.Notices[i], e.rec.Meta)
	}
	switch d.Drop {
	case rules.DroppedByRule:
		e.tally.drop(dropRule, 1, inBytes)
		return true
	case rules.DroppedByRateLimit:
		e.tally.drop(dropRateLimit, 1, inBytes)
		return true
	case rules.DroppedUnrouted:
		e.tally.drop(dropUnrouted, 1, inBytes)
		return true
	}
	line := e.line
	for _, r := range d.Edits {
		line = r.Edit(line, &e.eb)
	}
	if !e.deliver(line, d.Outputs, inBytes) {
		return false
	}
	if taps := e.s.taps.Load(); taps != nil {
		e.tap(*taps, line, &e.rec)
	}
	return true
}

// deliver appends line to the batches of the outputs in mask: the first
// one counts the record for its listener, the others get copies. It
// reports false when an output was retired meanwhile (nothing was added).
func (e *Emitter) deliver(line []byte, mask uint64, inBytes int) bool {
	first := true
	for m := mask; m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		if e.r.Outputs[i].Queue == nil {
			continue
		}
		if e.batchFor(i, first) == nil {
			return false
		}
		first = false
	}
	first = true
	for m := mask; m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		st := &e.outs[i]
		if e.r.Outputs[i].Queue == nil {
			st.discarded++
			st.discardedBytes += inBytes
			continue
		}
		b := st.copies
		if first {
			b = st.first
			st.firstIn += inBytes
		} else {
			st.copiesIn += inBytes
		}
		first = false
		b.Buf = append(b.Buf, line...)
		b.Records++
		if len(b.Buf) >= e.s.batchBytes {
			e.full = true
		}
	}
	if first { // only discard outputs
		e.tally.drop(dropDiscarded, 1, inBytes)
	}
	return true
}

// batchFor returns the batch for output i (first: of records that count
// for the listener), starting one if there is none. It returns nil when
// the output was retired: its queue takes nothing new.
func (e *Emitter) batchFor(i int, first bool) *pipeline.Batch {
	st := &e.outs[i]
	p := &st.copies
	if first {
		p = &st.first
	}
	if *p != nil {
		return *p
	}
	o := e.r.Outputs[i]
	// held first, retired second: Route marks retired first and its
	// caller checks held second, so either sees the other.
	o.held.Add(1)
	if o.retired.Load() {
		o.held.Add(-1)
		e.flush()
		e.use(e.s.routing.Load())
		return nil
	}
	b := o.Queue.NewBatch()
	if first {
		b.Origin = e.m
	}
	*p = b
	return b
}

// emitNotice writes a rate limit's summary for its key as one record, to
// the rule's outputs (or the unrouted ones), ahead of the record that
// lifted the limit. It counts as a record of the listener.
func (e *Emitter) emitNotice(n *rules.Notice, meta *record.Meta) {
	p := append(e.notice[:0], `{"message":"`...)
	msg := "rate limit: " + strconv.Itoa(n.Suppressed) + " records from " + n.Key + " " + n.Value +
		" suppressed by rule " + n.Rule.Name
	p, _ = jsonstr.AppendEscaped(p, []byte(msg))
	p = append(p, `","event":"rate_limit","rule":`...)
	p = jsonstr.AppendEscapedString(append(p, '"'), n.Rule.Name)
	p = append(p, `","key":`...)
	p = jsonstr.AppendEscapedString(append(p, '"'), n.Key)
	p = append(p, `","value":`...)
	p = jsonstr.AppendEscapedString(append(p, '"'), n.Value)
	p = append(p, `","suppressed":`...)
	p = strconv.AppendInt(p, int64(n.Suppressed), 10)
	p = append(p, '}')
	payloadLen := len(p)
	line, res := e.enc.Append(p, p, meta, 0) // the line follows the payload in the same buffer
	e.notice = line
	e.tally.Add(res)
	e.since++
	mask := n.Rule.Routes()
	if mask == 0 {
		mask = e.r.Rules.Unrouted
	}
	if mask == 0 || !e.deliver(line[payloadLen:], mask, payloadLen) {
		e.tally.drop(dropUnrouted, 1, payloadLen)
	}
}

// Message emits the records of one message (a datagram, a queue message,
// a ring frame: package framing's Message rules), cut says the kernel cut
// the message at its buffer's end.
func (e *Emitter) Message(p []byte, maxRecord int, cut bool, meta *record.Meta) {
	e.msgMeta = meta
	framing.Message(p, maxRecord, cut, e.messageFn)
	e.msgMeta = nil
}

func (e *Emitter) messageRecord(rec []byte, flags record.Flags) { e.Emit(rec, e.msgMeta, flags) }

// Done says that c.To may learn c.Mark once every record emitted so far
// is written (an acknowledged connection's byte count, a shared-memory
// ring's read offset); records a rule dropped count as handled. A source
// calls it after the records its mark covers, and before any later
// record: the next Emit may hand the batches over. A completion for the
// same Completer as the previous one replaces it: marks only grow. It
// reports false, and does nothing, when no record was emitted since the
// last hand-over, or the hard stop was reached.
func (e *Emitter) Done(c pipeline.Completion) bool {
	if e.err != nil || e.since == 0 {
		return false
	}
	if n := len(e.pending); n > 0 && e.pending[n-1].To == c.To {
		e.pending[n-1].Mark = c.Mark
		return true
	}
	e.pending = append(e.pending, c)
	return true
}

// Pending is the number of records emitted since the last hand-over.
func (e *Emitter) Pending() int { return e.since }

// Flush hands the collected batches to the outputs, blocking while a
// queue that blocks is full (backpressure) but not past the hard stop,
// and adds the counts to the metrics. It returns the error that stopped a
// Submit (the hard stop), then and at every later call.
func (e *Emitter) Flush() error {
	if e.err == nil {
		e.flush()
	}
	e.flushCounts()
	return e.err
}

// flush hands every batch over; the completions of the records they hold
// go with them.
func (e *Emitter) flush() {
	e.full = false
	e.since = 0
	n := 0
	for i := range e.outs {
		st := &e.outs[i]
		if st.first != nil && st.first.Records > 0 {
			n++
		}
		if st.copies != nil && st.copies.Records > 0 {
			n++
		}
	}
	// Completions: straight on the batch when it is the only one and
	// nothing earlier is outstanding through a joint (the common case:
	// one output, no rules); else on a joint that reaches them only once
	// every batch of this hand-over, and every earlier joint, is written.
	var done pipeline.Completion
	if len(e.pending) > 0 && (n != 1 || !e.joints.empty() || e.r.direct < 0) {
		done = pipeline.Completion{To: e.joints.add(e.pending, n)}
	}
	if n > 0 {
		e.flushCounts() // counters first: whoever sees the records may look at them
	}
	for i := range e.outs {
		st := &e.outs[i]
		o := e.r.Outputs[i]
		if st.discarded > 0 && o.Metrics != nil {
			o.Metrics.Drop(metrics.CauseDiscarded, st.discarded, st.discardedBytes)
		}
		st.discarded, st.discardedBytes = 0, 0
		for _, k := range [2]bool{true, false} {
			p, in := &st.copies, &st.copiesIn
			if k {
				p, in = &st.first, &st.firstIn
			}
			b := *p
			if b == nil {
				continue
			}
			*p = nil
			b.InBytes, *in = *in, 0
			if b.Records > 0 {
				if done.To != nil {
					b.Done = append(b.Done, done)
				} else if len(e.pending) > 0 {
					b.Done = append(b.Done, e.pending...)
				}
			}
			e.handOver(o, b)
			o.held.Add(-1)
		}
	}
	clear(e.pending)
	e.pending = e.pending[:0]
	e.joints.ready()
}

// handOver submits b to o: waiting when o blocks (or b carries
// completions), else dropping b, counted, when o's queue is full.
func (e *Emitter) handOver(o *Output, b *pipeline.Batch) {
	if b.Records == 0 {
		o.Queue.Submit(e.s.hardStop, b) // recycles it
		return
	}
	if e.err != nil {
		e.lose(o, b, dropDrainTimeout)
		return
	}
	if ts, ok := o.Queue.(trySubmitter); ok && o.drop.Load() && len(b.Done) == 0 {
		if !ts.TrySubmit(b) {
			e.lose(o, b, dropOutputFull)
			if r, ok := o.Queue.(interface{ Recycle(*pipeline.Batch) }); ok {
				r.Recycle(b)
			}
		}
		return
	}
	if err := o.Queue.Submit(e.s.hardStop, b); err != nil {
		e.err = err
		e.lose(o, b, dropDrainTimeout)
	}
}

// lose counts b's records as not delivered, for cause: for the output,
// and for the listener when they count there (a first-output batch).
func (e *Emitter) lose(o *Output, b *pipeline.Batch, cause int) {
	if o.Metrics != nil {
		o.Metrics.Drop(dropCauses[cause], b.Records, b.InBytes)
	}
	if b.Origin != nil {
		e.tally.drop(cause, b.Records, b.InBytes)
	}
	e.flushCounts()
}

// flushCounts adds the counts to the metrics, and what was lost against
// the operator's will (the hard stop, a full output) to the sink's total.
func (e *Emitter) flushCounts() {
	for _, c := range [...]int{dropDrainTimeout, dropOutputFull} {
		if d := e.tally.drops[c]; d.n > 0 || d.bytes > 0 {
			e.s.addLost(dropCauses[c], d.n, d.bytes)
		}
	}
	e.tally.Flush(e.m)
	e.takeRuleCounts()
}

// takeRuleCounts adds what the rules did since the last time to their
// counters (the routing's in force: the Scratch counts by its rules).
func (e *Emitter) takeRuleCounts() {
	if e.r != nil && e.r.Rules != nil {
		e.sc.Take(func(i, matched, dropped, suppressed int) {
			if i >= len(e.r.rules) {
				return
			}
			c := &e.r.rules[i]
			if matched > 0 {
				c.matched.Add(float64(matched))
			}
			if dropped > 0 {
				c.dropped.Add(float64(dropped))
			}
			if suppressed > 0 {
				c.suppressed.Add(float64(suppressed))
			}
		})
	}
}

// Err is the error that stopped the Emitter (the hard stop), or nil.
func (e *Emitter) Err() error { return e.err }

// Release ends the Emitter; it must not be used afterwards. Call Flush
// first: records still waiting (there are none after a Flush) are counted
// as dropped, never lost silently.
func (e *Emitter) Release() {
	for i := range e.outs {
		st := &e.outs[i]
		o := e.r.Outputs[i]
		for _, b := range [2]*pipeline.Batch{st.first, st.copies} {
			if b == nil {
				continue
			}
			if b.Records > 0 && b == st.first {
				e.tally.drop(dropDrainTimeout, b.Records, st.firstIn)
			}
			o.held.Add(-1)
		}
		*st = outState{}
	}
	e.flushCounts()
}

// jointQueue orders the completions of an Emitter's hand-overs when their
// records went to several outputs (or none: all dropped by rules): a
// source may learn a mark only once every record before it is written,
// whichever writer is faster.
type jointQueue struct {
	mu   sync.Mutex
	list []*joint // in hand-over order
}

// joint is one hand-over's completions, reached once its batches are all
// written (pipeline.Completer, called by each output's writer).
type joint struct {
	q    *jointQueue
	left atomic.Int32
	done []pipeline.Completion
}

func (j *joint) Written(uint64) {
	if j.left.Add(-1) == 0 {
		j.q.complete()
	}
}

// add queues the completions of a hand-over of n batches.
func (q *jointQueue) add(done []pipeline.Completion, n int) *joint {
	j := &joint{q: q, done: append([]pipeline.Completion(nil), done...)}
	j.left.Store(int32(n))
	q.mu.Lock()
	q.list = append(q.list, j)
	q.mu.Unlock()
	return j
}

// complete tells the sources of every written joint at the head of the
// queue, in order.
func (q *jointQueue) complete() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.list) > 0 && q.list[0].left.Load() <= 0 {
		for _, c := range q.list[0].done {
			c.To.Written(c.Mark)
		}
		q.list[0] = nil
		q.list = q.list[1:]
	}
}

// ready completes a hand-over that had no batch (every record dropped by
// a rule) once the ones before it are written.
func (q *jointQueue) ready() { q.complete() }

func (q *jointQueue) empty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.list) == 0
}

// Tap receives copies of the records that flow through the sink, as they
// are written (after the rules' edits): what `aggregator tap` shows. A
// tap never slows the pipeline: a copy that does not fit its buffer is
// dropped, counted in Dropped.
type Tap struct {
	// Match selects the records (nil: every record); its rule routes what
	// it wants to its one output.
	Match *rules.Set
	// Lines receives the copies (each a fresh slice, one JSON line).
	Lines   chan []byte
	Dropped atomic.Int64
}

// AddTap starts sending copies to t.
func (s *Sink) AddTap(t *Tap) {
	s.tapMu.Lock()
	defer s.tapMu.Unlock()
	next := append(append([]*Tap(nil), s.tapList()...), t)
	s.taps.Store(&next)
}

// RemoveTap stops sending copies to t.
func (s *Sink) RemoveTap(t *Tap) {
	s.tapMu.Lock()
	defer s.tapMu.Unlock()
	var next []*Tap
	for _, x := range s.tapList() {
		if x != t {
			next = append(next, x)
		}
	}
	if len(next) == 0 {
		s.taps.Store(nil)
		return
	}
	s.taps.Store(&next)
}

func (s *Sink) tapList() []*Tap {
	if p := s.taps.Load(); p != nil {
		return *p
	}
	return nil
}

// tap offers the record just delivered (its line as written) to every
// tap that wants it.
func (e *Emitter) tap(taps []*Tap, line []byte, rec *rules.Record) {
	for _, t := range taps {
		if t.Match != nil && t.Match.Eval(rec, &e.tapScratch).Outputs == 0 {
			continue
		}
		select {
		case t.Lines <- append([]byte(nil), line...):
		default:
			t.Dropped.Add(1)
		}
	}
}
