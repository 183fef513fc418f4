package transport

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/budget"
	"github.com/ipclab/logagg/internal/metrics"
)

// Admission is what an accepting listener reserves before each accept:
// a connection slot (Options.MaxConns), the connection's part of the
// connections' memory share (Deps.Conns, ADR 0060) and the descriptors
// the connection needs (an FDGate). While any is short the listener does not call
// accept, so a new client waits in the kernel's listen backlog (or sees
// its connect fail once that is full) instead of being accepted and then
// dropped; the time it spends so is counted by cause
// (accept_paused_seconds_total) and logged when it starts and ends (ADR
// 0017, ADR 0052).
//
// An Admission belongs to one accept loop; Release may be called from
// any goroutine.
type Admission struct {
	slots  chan struct{} // a token per open connection; nil: no limit
	mem    *budget.Gate  // the connections' memory; nil: no such bound
	cost   int64         // what each admitted connection holds of mem
	spent  prometheus.Counter
	fds    *FDGate // nil: the kernel's EMFILE alone
	log    *slog.Logger
	paused map[string]prometheus.Counter

	mu     sync.Mutex
	logged map[string]time.Time // when a pause of each cause was last logged
}

// AdmissionConfig describes an Admission.
type AdmissionConfig struct {
	MaxConns int // 0: no limit
	// Memory is the memory every listener's connections share (Deps.Conns);
	// each connection admitted holds MemoryCost of it until its slot is
	// released. Nil: no such bound.
	Memory     *budget.Gate
	MemoryCost int64
	// Spent counts the waits for Memory (memory_limited_total{kind=
	// "connections"}); nil: not counted.
	Spent prometheus.Counter
	FDs   *FDGate
	Log   *slog.Logger // names the listener in each line
	// Paused resolves the paused-accepting counter of a cause (nil: not
	// counted). Causes are metrics.Pause*.
	Paused func(cause string) prometheus.Counter
	// Causes are the causes this listener can pause for, resolved at once
	// so that a scrape shows them at 0.
	Causes []string
}

// pauseLogEvery bounds how often the start of a pause is logged per
// cause: a listener at its limit under churn pauses and resumes for every
// connection.
const pauseLogEvery = 10 * time.Second

// NewAdmission makes the Admission of one listener.
func NewAdmission(c AdmissionConfig) *Admission {
	a := &Admission{fds: c.FDs, log: c.Log, paused: map[string]prometheus.Counter{}, logged: map[string]time.Time{},
		spent: c.Spent}
	if c.Memory != nil && c.MemoryCost > 0 {
		a.mem, a.cost = c.Memory, c.MemoryCost
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if c.MaxConns > 0 {
		a.slots = make(chan struct{}, c.MaxConns)
	}
	if c.Paused != nil {
		for _, cause := range c.Causes {
			a.paused[cause] = c.Paused(cause)
		}
	}
	return a
}

// ListenerAdmission is the Admission of a listener opened with d: its
// MaxConns, the connections' memory share at ConnCost a connection, the
// shared FDGate, its log and metrics.
func ListenerAdmission(d Deps, causes ...string) *Admission {
	return NewAdmission(ListenerAdmissionConfig(d, ConnCost, causes...))
}

// ListenerAdmissionConfig is what ListenerAdmission makes its Admission
// from, each connection holding cost of the connections' memory (an shm
// producer holds its ring too).
func ListenerAdmissionConfig(d Deps, cost int64, causes ...string) AdmissionConfig {
	c := AdmissionConfig{MaxConns: d.Opts.MaxConns, FDs: d.FDs, Log: d.Log, Causes: causes,
		Memory: d.Conns, MemoryCost: cost}
	if d.Conns != nil {
		c.Causes = append(c.Causes[:len(c.Causes):len(c.Causes)], metrics.PauseMemoryBudget)
	}
	if d.Metrics != nil {
		c.Paused = d.Metrics.AcceptPaused
	}
	if d.Root != nil {
		c.Spent = d.Root.MemoryLimited.WithLabelValues(metrics.LimitConnections)
	}
	return c
}

// FDs is the gate the admission reserves descriptors from (may be nil).
func (a *Admission) FDs() *FDGate { return a.fds }

// Admit waits until one more connection can be served: a slot, its part
// of the connections' memory, and fds descriptors from the gate. It reports false, holding nothing, once ctx
// ended. After true the caller accepts, then calls Commit (accepted) or
// Refund (nothing accepted).
func (a *Admission) Admit(ctx context.Context, fds int) bool {
	if ctx.Err() != nil {
		return false
	}
	if !a.takeSlot(ctx) {
		return false
	}
	if !a.takeMemory(ctx) {
		a.releaseSlot()
		return false
	}
	if !a.takeFDs(ctx, fds) {
		a.releaseSlot()
		a.releaseMemory()
		return false
	}
	return true
}

// takeMemory takes the connection's part of the connections' memory,
// waiting (counted once in Spent, and by the second as a pause) while
// connections that are open hold it all.
func (a *Admission) takeMemory(ctx context.Context) bool {
	if a.mem == nil || a.mem.TryTake(a.cost) {
		return true
	}
	if a.spent != nil {
		a.spent.Inc()
	}
	p := a.startPause(metrics.PauseMemoryBudget, nil)
	defer p.end()
	for {
		// A second at a time, so that a long pause shows in scrapes
		// while it lasts.
		tctx, cancel := context.WithTimeout(ctx, time.Second)
		ok := a.mem.Take(tctx.Done(), a.cost, nil)
		cancel()
		if ok {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		p.count()
	}
}

func (a *Admission) releaseMemory() {
	if a.mem != nil {
		a.mem.Give(a.cost)
	}
}

func (a *Admission) takeSlot(ctx context.Context) bool {
	if a.slots == nil {
		return true
	}
	select {
	case a.slots <- struct{}{}:
		return true
	default:
	}
	p := a.startPause(metrics.PauseMaxConns, nil)
	defer p.end()
	tick := time.NewTicker(time.Second) // a long pause shows in scrapes while it lasts
	defer tick.Stop()
	for {
		select {
		case a.slots <- struct{}{}:
			return true
		case <-ctx.Done():
			return false
		case <-tick.C:
			p.count()
		}
	}
}

func (a *Admission) takeFDs(ctx context.Context, n int) bool {
	if a.fds == nil || n <= 0 || a.fds.Acquire(n) {
		return true
	}
	p := a.startPause(metrics.PauseFDs, nil)
	defer p.end()
	// Connections closing wake us (Freed); descriptors others close do
	// not, hence the timer.
	backoff := 5 * time.Millisecond
	for {
		t := time.NewTimer(backoff)
		select {
		case <-a.fds.Freed():
		case <-t.C:
			backoff = min(2*backoff, 250*time.Millisecond)
		case <-ctx.Done():
			t.Stop()
			return false
		}
		t.Stop()
		p.count()
		if a.fds.Acquire(n) {
			return true
		}
	}
}

// TakeFDs reserves n descriptors without waiting and without a slot (the
// backlog accepted at shutdown).
func (a *Admission) TakeFDs(n int) bool { return a.fds == nil || n <= 0 || a.fds.Acquire(n) }

// Commit says that n of the descriptors reserved now exist; fd is the
// number of one of them (-1 if none), which tells the gate that every
// lower one is open.
func (a *Admission) Commit(n, fd int) {
	if a.fds != nil && n > 0 {
		a.fds.Commit(n, fd)
	}
}

// Refund gives back n reserved descriptors that were never opened, and
// the slot and memory Admit took when slot is true.
func (a *Admission) Refund(n int, slot bool) {
	if a.fds != nil && n > 0 {
		a.fds.Refund(n)
	}
	if slot {
		a.releaseSlot()
		a.releaseMemory()
	}
}

// Release says that n committed descriptors were closed, and frees the
// slot and the memory when slot is true (a connection ended).
func (a *Admission) Release(n int, slot bool) {
	if a.fds != nil && n > 0 {
		a.fds.Release(n)
	}
	if slot {
		a.releaseSlot()
		a.releaseMemory()
	}
}

func (a *Admission) releaseSlot() {
	if a.slots != nil {
		<-a.slots
	}
}

// Failed handles an accept (or connection set-up) that failed with err
// before anything was accepted, once what Admit reserved is refunded: it
// pauses, counted under the cause err names, before the next attempt. It
// reports false once ctx ended.
func (a *Admission) Failed(ctx context.Context, err error) bool {
	cause, wait := a.classify(err)
	if cause == "" {
		// ECONNABORTED and the like: that client is gone, the next is fine.
		return ctx.Err() == nil
	}
	p := a.startPause(cause, err)
	p.quiet = true // whether the next accept succeeds is not known yet
	defer p.end()
	var freed <-chan struct{}
	if a.fds != nil && cause == metrics.PauseFDs {
		freed = a.fds.Freed()
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-freed:
	case <-t.C:
	case <-ctx.Done():
	}
	return ctx.Err() == nil
}

// classify names the cause of an accept error and how long to wait
// before trying again ("" for errors of one client only).
func (a *Admission) classify(err error) (cause string, wait time.Duration) {
	switch {
	case errors.Is(err, unix.EMFILE), errors.Is(err, unix.ENFILE):
		if a.fds != nil {
			a.fds.Exhausted()
		}
		return metrics.PauseFDs, 50 * time.Millisecond
	case errors.Is(err, unix.ENOMEM), errors.Is(err, unix.ENOBUFS), errors.Is(err, unix.ENOSPC):
		return metrics.PauseMemory, 100 * time.Millisecond
	case errors.Is(err, unix.ECONNABORTED), errors.Is(err, unix.EINTR), errors.Is(err, unix.EPROTO),
		errors.Is(err, unix.EPERM), errors.Is(err, unix.ECONNRESET):
		return "", 0
	}
	// Unknown: do not spin on it.
	return metrics.PauseError, 100 * time.Millisecond
}

// pause is one stretch of not accepting.
type pause struct {
	a      *Admission
	cause  string
	start  time.Time
	last   time.Time
	logged bool
	quiet  bool // no "accepting again" line
	err    error
}

func (a *Admission) startPause(cause string, err error) *pause {
	now := time.Now()
	p := &pause{a: a, cause: cause, start: now, last: now, err: err}
	a.mu.Lock()
	if now.Sub(a.logged[cause]) >= pauseLogEvery {
		a.logged[cause] = now
		p.logged = true
	}
	a.mu.Unlock()
	if p.logged {
		args := []any{"cause", cause}
		if p.err != nil {
			args = append(args, "err", p.err)
		}
		if cause == metrics.PauseFDs && a.fds != nil {
			args = append(args, "fds_open", a.fds.Open(), "fd_limit", a.fds.Limit(), "fds_reserved", a.fds.Reserve())
		}
		a.log.Warn("not accepting new connections: "+pauseReason(cause)+"; new clients wait in the listen backlog", args...)
	}
	return p
}

func pauseReason(cause string) string {
	switch cause {
	case metrics.PauseMaxConns:
		return "every connection slot is taken (--max-conns)"
	case metrics.PauseFDs:
		return "file descriptors are short (what is left is kept for the output, reloads and metrics)"
	case metrics.PauseMemoryBudget:
		return "the connections' share of the memory budget is spent (--memory)"
	case metrics.PauseMemory:
		return "the kernel refused memory for a new connection"
	}
	return "the kernel refused resources for a new connection"
}

// count adds the time since the last count to the cause's counter.
func (p *pause) count() {
	now := time.Now()
	if c := p.a.paused[p.cause]; c != nil {
		c.Add(now.Sub(p.last).Seconds())
	}
	p.last = now
}

func (p *pause) end() {
	p.count()
	if p.logged && !p.quiet {
		p.a.log.Info("accepting new connections again", "cause", p.cause,
			"paused", p.last.Sub(p.start).Round(time.Millisecond))
	}
}
