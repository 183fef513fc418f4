package evloop

import (
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/testenv"
)

// pipeHandler reads whatever its pipe holds and counts bytes.
type pipeHandler struct {
	l      *Loop
	fd     int
	slot   Slot
	bytes  atomic.Int64
	calls  atomic.Int64
	onEOF  func()
	closed atomic.Bool
}

func (h *pipeHandler) Ready(uint32) {
	h.calls.Add(1)
	var b [4096]byte
	n, err := unix.Read(h.fd, b[:])
	if n > 0 {
		h.bytes.Add(int64(n))
		return
	}
	if err == unix.EAGAIN {
		return
	}
	h.l.Remove(h.slot)
	unix.Close(h.fd)
	h.closed.Store(true)
	if h.onEOF != nil {
		h.onEOF()
	}
}

func newPipe(t *testing.T) (r int, w *os.File) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	return p[0], os.NewFile(uintptr(p[1]), "w")
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, what, cond)
}

func TestReadyAddRemoveClose(t *testing.T) {
	g, err := NewGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	var hs []*pipeHandler
	var ws []*os.File
	for range 10 {
		r, w := newPipe(t)
		l := g.Pick()
		h := &pipeHandler{l: l, fd: r}
		l.Do(func() {
			s, err := l.Add(r, h)
			if err != nil {
				t.Error(err)
			}
			h.slot = s
		})
		hs, ws = append(hs, h), append(ws, w)
	}
	if a, b := g.Loops()[0], g.Loops()[1]; a.Handlers()+b.Handlers() != 10 {
		waitUntil(t, "registration", func() bool { return a.Handlers()+b.Handlers() == 10 })
	}
	if d := g.Loops()[0].Handlers() - g.Loops()[1].Handlers(); d > 2 || d < -2 {
		t.Errorf("Pick spread 10 handlers %d/%d", g.Loops()[0].Handlers(), g.Loops()[1].Handlers())
	}
	for i, w := range ws {
		w.Write(make([]byte, 100*(i+1)))
	}
	for i, h := range hs {
		waitUntil(t, "data", func() bool { return h.bytes.Load() == int64(100*(i+1)) })
	}
	closed := make(chan struct{})
	go func() { g.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while handlers were registered")
	case <-time.After(50 * time.Millisecond):
	}
	for _, w := range ws {
		w.Close() // EOF: each handler removes itself
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after every handler was removed")
	}
	for i, h := range hs {
		if !h.closed.Load() {
			t.Errorf("handler %d not closed", i)
		}
	}
}

type hotHandler struct{ calls atomic.Int64 }

func (h *hotHandler) Ready(ev uint32) { h.calls.Add(1) }

func TestHotTimersAndPause(t *testing.T) {
	g, err := NewGroup(1)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	l := g.Loops()[0]
	r, w := newPipe(t)
	defer w.Close()
	h := &hotHandler{}
	var slot Slot
	fired := make(chan time.Duration, 1)
	start := time.Now()
	l.Do(func() {
		slot, _ = l.Add(r, h)
		l.SetHot(slot, true)
		l.After(30*time.Millisecond, func() { fired <- time.Since(start) })
		l.After(time.Hour, func() { t.Error("a stopped timer fired") })
		tm := l.After(10*time.Millisecond, func() { t.Error("a stopped timer fired") })
		l.Stop(tm)
	})
	waitUntil(t, "hot calls", func() bool { return h.calls.Load() > 100 })
	if d := <-fired; d < 30*time.Millisecond || d > 2*time.Second {
		t.Errorf("30 ms timer fired after %v", d)
	}
	// Not hot, no data: the handler is not called (polled for a 20 ms
	// window without calls).
	l.Do(func() { l.SetHot(slot, false) })
	waitUntil(t, "cool down", func() bool { a := h.calls.Load(); time.Sleep(20 * time.Millisecond); return h.calls.Load() == a })
	// A pause asked for each round spaces the rounds.
	var rounds atomic.Int64
	var remove func()
	l.Do(func() {
		remove = l.OnRound(func() { rounds.Add(1); l.Pause(5 * time.Millisecond) })
		l.SetHot(slot, true)
	})
	time.Sleep(200 * time.Millisecond) // the measurement: rounds in 200 ms
	if n := rounds.Load(); n > 60 || n < 5 {
		t.Errorf("%d rounds in 200 ms with 5 ms pauses", n)
	}
	l.Do(func() { remove(); l.Remove(slot); unix.Close(r) })
	n := rounds.Load()
	time.Sleep(20 * time.Millisecond) // a window in which nothing may happen
	if rounds.Load() > n+1 {
		t.Error("a removed round hook is still called")
	}
}

// TestThreadsBounded registers many idle fds and checks the process does
// not grow a thread per fd.
func TestThreadsBounded(t *testing.T) {
	g, err := NewGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	before := threads(t)
	var fds []int
	var ws []*os.File
	for range 500 {
		r, w := newPipe(t)
		fds, ws = append(fds, r), append(ws, w)
		l := g.Pick()
		h := &pipeHandler{l: l, fd: r}
		l.Do(func() { h.slot, _ = l.Add(r, h) })
	}
	waitUntil(t, "500 registrations", func() bool { return g.Loops()[0].Handlers()+g.Loops()[1].Handlers() == 500 })
	if after := threads(t); after > before+2 {
		t.Errorf("threads %d -> %d with 500 idle fds", before, after)
	}
	for _, w := range ws {
		w.Close()
	}
	g.Close()
	_ = fds
	runtime.GC()
}

func threads(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// An unwatched fd raises no event; watched again, data that came meanwhile
// is reported at once (level-triggered).
func TestWatch(t *testing.T) {
	g, err := NewGroup(1)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	l := g.Loops()[0]
	r, w := newPipe(t)
	defer w.Close()
	h := &hotHandler{}
	var slot Slot
	done := make(chan struct{})
	l.Do(func() { slot, _ = l.Add(r, h); l.Watch(slot, false); close(done) })
	<-done
	w.Write([]byte("x"))
	time.Sleep(50 * time.Millisecond) // a window in which nothing may happen
	if n := h.calls.Load(); n != 0 {
		t.Fatalf("an unwatched fd was reported %d times", n)
	}
	l.Do(func() { l.Watch(slot, true) })
	waitUntil(t, "the pending data reported", func() bool { return h.calls.Load() > 0 })
	l.Do(func() { l.Remove(slot); unix.Close(r) })
}
