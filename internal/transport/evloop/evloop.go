// Package evloop runs the aggregator's readers on a few epoll event loops,
// so that a connection costs a file descriptor and a small struct, never an
// OS thread or a read buffer, whatever the number of connections or
// listeners (docs/adr/0016-one-event-loop-per-cpu-and-why-reads-pause.md).
//
// A Group is a fixed set of Loops (by default one per GOMAXPROCS). Each Loop
// is one goroutine waiting in epoll_wait(2) on its own epoll instance, so
// the daemon holds one thread per loop however many fds it watches.
// Listeners register each accepted fd with a Handler on one loop (Pick
// spreads them); the loop calls Handler.Ready when the fd is readable.
//
// # Rounds, pauses and hot handlers
//
// One pass over the events epoll_wait returned is a round. A handler that
// read less than a full buffer may ask for a pause (Pause): the loop then
// sleeps that long before it waits again, so that a producer's writes
// collect in the socket instead of each waking the aggregator (the read
// coalescing of docs/adr/0016-one-event-loop-per-cpu-and-why-reads-pause.md). A handler
// that read a full buffer asks for another round at once (More); epoll is
// level-triggered, so it is reported again. A hot handler (SetHot) is called
// every round without an event, for sources that have no fd to wake us
// while busy (a shared-memory ring). At the end of every round the loop
// calls its round hooks (OnRound), which submit the round's batches.
//
// # Concurrency and lifetimes
//
// Everything a Loop owns (its handlers, timers, hooks) is touched only on
// its goroutine: Handler methods, Add, Remove, SetHot, After, Pause and More
// must be called there. Do queues a function to run there from any
// goroutine and wakes the loop (an eventfd in the epoll set). A Group is
// started by NewGroup and stopped by Close, which waits until every loop has
// no handlers left: listeners remove theirs when they stop.
package evloop

import (
	"container/heap"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Handler owns one fd registered in a Loop.
type Handler interface {
	// Ready is called on the loop's goroutine when the fd is readable, hung
	// up or in error (events holds the epoll events), or with events 0 for
	// a hot handler.
	Ready(events uint32)
}

// Slot names a registered handler in its loop.
type Slot struct {
	index int32
	gen   uint32
}

// Valid reports whether s names a registration (the zero Slot does not).
func (s Slot) Valid() bool { return s.gen != 0 }

type entry struct {
	h       Handler
	fd      int
	gen     uint32
	hot     bool
	unwatch bool   // taken out of the epoll set by Watch(false)
	round   uint64 // the round in which Ready was last called
}

// wakeData is the epoll data of the loop's eventfd; handler slots use
// index+1 in the low half, so it never collides.
const wakeData = 0

// maxWait bounds one epoll_wait, so timers set from outside a round are
// never late by more than this.
const maxWait = time.Second

// Loop is one event loop. See the package doc.
type Loop struct {
	id     int
	epfd   int
	wakefd int

	mu     sync.Mutex
	queue  []func()
	queued atomic.Bool

	entries []entry
	free    []int32
	nextGen uint32
	hot     []int32
	live    atomic.Int64 // registered handlers
	picked  atomic.Int64 // picked for a handler not registered yet

	timers timerHeap
	hooks  []*func()
	values map[any]any

	round   uint64
	pause   time.Duration // asked for in this round
	more    bool          // a handler asked for another round at once
	closing bool

	events []unix.EpollEvent
	done   chan struct{}
}

// Group is a fixed set of loops.
type Group struct {
	loops []*Loop
	next  atomic.Uint32
	once  sync.Once
}

// NewGroup starts n loops (n <= 0: GOMAXPROCS).
func NewGroup(n int) (*Group, error) {
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	g := &Group{}
	for i := range n {
		l, err := newLoop(i)
		if err != nil {
			g.closeNow()
			return nil, err
		}
		g.loops = append(g.loops, l)
		go l.run()
	}
	return g, nil
}

// Loops returns the group's loops.
func (g *Group) Loops() []*Loop { return g.loops }

// Pick returns the loop with the fewest handlers (ties in turn), for a
// handler the caller will Add there: it counts as one until then.
func (g *Group) Pick() *Loop {
	start := int(g.next.Add(1))
	best := g.loops[start%len(g.loops)]
	for i := 1; i < len(g.loops); i++ {
		if l := g.loops[(start+i)%len(g.loops)]; l.load() < best.load() {
			best = l
		}
	}
	best.picked.Add(1)
	return best
}

func (l *Loop) load() int64 { return l.live.Load() + l.picked.Load() }

// Close stops every loop once it has no handlers left, and waits.
func (g *Group) Close() {
	g.once.Do(func() {
		for _, l := range g.loops {
			l.Do(func() { l.closing = true })
		}
		for _, l := range g.loops {
			<-l.done
		}
	})
}

func (g *Group) closeNow() {
	for _, l := range g.loops {
		l.Do(func() { l.closing = true })
		<-l.done
	}
}

func newLoop(id int) (*Loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("evloop: epoll_create1: %w", err)
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("evloop: eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN}
	setData(&ev, wakeData)
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(wakefd)
		return nil, fmt.Errorf("evloop: epoll_ctl eventfd: %w", err)
	}
	return &Loop{id: id, epfd: epfd, wakefd: wakefd, events: make([]unix.EpollEvent, 256), done: make(chan struct{})}, nil
}

// ID is the loop's index in its group.
func (l *Loop) ID() int { return l.id }

// Handlers is the number of handlers registered (safe from any goroutine).
func (l *Loop) Handlers() int { return int(l.live.Load()) }

// Do runs fn on the loop's goroutine, soon. Safe from any goroutine.
func (l *Loop) Do(fn func()) {
	l.mu.Lock()
	l.queue = append(l.queue, fn)
	l.mu.Unlock()
	if !l.queued.Swap(true) {
		var one = [8]byte{1}
		unix.Write(l.wakefd, one[:])
	}
}

// ErrClosing is returned by Add once the loop was told to stop.
var ErrClosing = errors.New("evloop: loop is closing")

// Add registers fd (non-blocking, readable events) with h. Loop only.
func (l *Loop) Add(fd int, h Handler) (Slot, error) {
	var i int32
	if n := len(l.free); n > 0 {
		i, l.free = l.free[n-1], l.free[:n-1]
	} else {
		l.entries = append(l.entries, entry{})
		i = int32(len(l.entries) - 1)
	}
	l.nextGen++
	if l.nextGen == 0 {
		l.nextGen = 1
	}
	s := Slot{index: i, gen: l.nextGen}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP}
	setData(&ev, uint64(i+1)|uint64(s.gen)<<32)
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		l.free = append(l.free, i)
		if l.picked.Load() > 0 {
			l.picked.Add(-1)
		}
		return Slot{}, fmt.Errorf("evloop: epoll_ctl add fd %d: %w", fd, err)
	}
	l.entries[i] = entry{h: h, fd: fd, gen: s.gen}
	l.live.Add(1)
	if l.picked.Load() > 0 {
		l.picked.Add(-1)
	}
	return s, nil
}

// Remove unregisters s; the handler closes its fd itself, after Remove.
// Loop only.
func (l *Loop) Remove(s Slot) {
	e := l.entry(s)
	if e == nil {
		return
	}
	if !e.unwatch {
		unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, e.fd, nil)
	}
	if e.hot {
		l.setHot(s.index, false)
	}
	*e = entry{}
	l.free = append(l.free, s.index)
	l.live.Add(-1)
}

// Watch takes s's fd out of the epoll set (false) or puts it back (true).
// A handler that reads its fd every round anyway (SetHot) unwatches it:
// while an fd is in an epoll set, every write of its peer runs the
// kernel's wake-up callback for the set, which the peer pays for in its
// write(2) (about a tenth of a flat-out unix stream producer's CPU per
// record here), although nobody waits. Putting it back reports it at once
// if it is readable (level-triggered). Loop only.
func (l *Loop) Watch(s Slot, on bool) error {
	e := l.entry(s)
	if e == nil || e.unwatch == !on {
		return nil
	}
	if !on {
		if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, e.fd, nil); err != nil {
			return fmt.Errorf("evloop: epoll_ctl del fd %d: %w", e.fd, err)
		}
		e.unwatch = true
		return nil
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP}
	setData(&ev, uint64(s.index+1)|uint64(s.gen)<<32)
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, e.fd, &ev); err != nil {
		return fmt.Errorf("evloop: epoll_ctl add fd %d: %w", e.fd, err)
	}
	e.unwatch = false
	return nil
}

// SetHot makes the loop call s's handler every round without an event
// (true), or only on events again (false). Loop only.
func (l *Loop) SetHot(s Slot, hot bool) {
	if e := l.entry(s); e != nil && e.hot != hot {
		l.setHot(s.index, hot)
	}
}

func (l *Loop) setHot(i int32, hot bool) {
	l.entries[i].hot = hot
	if hot {
		l.hot = append(l.hot, i)
		return
	}
	for k, v := range l.hot {
		if v == i {
			l.hot[k] = l.hot[len(l.hot)-1]
			l.hot = l.hot[:len(l.hot)-1]
			return
		}
	}
}

func (l *Loop) entry(s Slot) *entry {
	if !s.Valid() || int(s.index) >= len(l.entries) || l.entries[s.index].gen != s.gen {
		return nil
	}
	return &l.entries[s.index]
}

// Pause asks the loop to sleep d before it waits for events again (the
// longest pause asked for in a round wins; More cancels it). Loop only.
func (l *Loop) Pause(d time.Duration) { l.pause = max(l.pause, d) }

// More asks for another round at once. Loop only.
func (l *Loop) More() { l.more = true }

// OnRound adds fn to the functions called at the end of every round and
// returns the function that removes it again. Loop only.
func (l *Loop) OnRound(fn func()) (remove func()) {
	p := &fn
	l.hooks = append(l.hooks, p)
	return func() {
		for i, h := range l.hooks {
			if h == p {
				l.hooks = append(l.hooks[:i], l.hooks[i+1:]...)
				return
			}
		}
	}
}

// Value returns the loop-local value stored under key, creating it with mk
// on first use: state that several handlers of one loop share (a read
// buffer, the set of connections holding partial frames). Loop only.
func (l *Loop) Value(key any, mk func() any) any {
	v, ok := l.values[key]
	if !ok {
		if l.values == nil {
			l.values = map[any]any{}
		}
		v = mk()
		l.values[key] = v
	}
	return v
}

// DeleteValue forgets the loop-local value stored under key. Loop only.
func (l *Loop) DeleteValue(key any) { delete(l.values, key) }

// Timer is a pending call of After.
type Timer struct {
	at    time.Time
	fn    func()
	index int // in the heap; -1 once fired or stopped
}

// After calls fn on the loop after d. Loop only.
func (l *Loop) After(d time.Duration, fn func()) *Timer {
	t := &Timer{at: time.Now().Add(d), fn: fn}
	heap.Push(&l.timers, t)
	return t
}

// Stop cancels t if it has not fired. Loop only.
func (l *Loop) Stop(t *Timer) {
	if t != nil && t.index >= 0 {
		heap.Remove(&l.timers, t.index)
	}
}

func (l *Loop) run() {
	defer close(l.done)
	defer unix.Close(l.epfd)
	defer unix.Close(l.wakefd)
	for {
		l.runQueue()
		if l.closing && l.live.Load() == 0 {
			return
		}
		if l.pause > 0 && !l.more {
			ts := unix.NsecToTimespec(l.pause.Nanoseconds())
			_ = unix.Nanosleep(&ts, nil)
		}
		timeout := l.timeout()
		n, err := unix.EpollWait(l.epfd, l.events, timeout)
		if err != nil && !errors.Is(err, unix.EINTR) {
			panic(fmt.Sprintf("evloop: epoll_wait: %v", err)) // EBADF/EFAULT/EINVAL: a bug, not input
		}
		l.round++
		l.pause, l.more = 0, false
		for _, ev := range l.events[:max(n, 0)] {
			d := getData(&ev)
			if d == wakeData {
				var b [8]byte
				unix.Read(l.wakefd, b[:])
				continue
			}
			i, gen := int32(uint32(d))-1, uint32(d>>32)
			if int(i) >= len(l.entries) || l.entries[i].gen != gen {
				continue // removed earlier in this round
			}
			l.entries[i].round = l.round
			l.entries[i].h.Ready(ev.Events)
		}
		for k := 0; k < len(l.hot); k++ {
			i := l.hot[k]
			if e := &l.entries[i]; e.round != l.round {
				e.round = l.round
				e.h.Ready(0)
			}
		}
		l.fireTimers()
		for _, fn := range l.hooks {
			(*fn)()
		}
	}
}

func (l *Loop) runQueue() {
	if !l.queued.Load() {
		return
	}
	l.mu.Lock()
	q := l.queue
	l.queue = nil
	l.queued.Store(false)
	l.mu.Unlock()
	for _, fn := range q {
		fn()
	}
}

// timeout is epoll_wait's timeout in ms: 0 when a round is due at once,
// else until the next timer, at most maxWait.
func (l *Loop) timeout() int {
	if l.more || len(l.hot) > 0 || l.queued.Load() {
		return 0
	}
	wait := maxWait
	if len(l.timers) > 0 {
		wait = min(wait, time.Until(l.timers[0].at))
		if wait <= 0 {
			return 0
		}
	}
	return int((wait + time.Millisecond - 1) / time.Millisecond)
}

func (l *Loop) fireTimers() {
	if len(l.timers) == 0 {
		return
	}
	now := time.Now()
	for len(l.timers) > 0 && !l.timers[0].at.After(now) {
		t := heap.Pop(&l.timers).(*Timer)
		t.fn()
	}
}

type timerHeap []*Timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) { t := x.(*Timer); t.index = len(*h); *h = append(*h, t) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}
