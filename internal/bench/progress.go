package bench

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// IsTerminal reports whether f is a terminal (TCGETS succeeds).
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Progress draws a one-line progress bar on a terminal. The measuring code
// calls Set/Add (an atomic store, cheap enough for a hot loop if called every
// few thousand iterations); a separate goroutine redraws ten times a second.
// A nil *Progress is valid and does nothing, so callers need no checks.
type Progress struct {
	f     *os.File
	total atomic.Int64
	done  atomic.Int64
	label atomic.Pointer[string]
	stop  chan struct{}
	wg    sync.WaitGroup
}

// NewProgress returns a bar drawn on f, or nil when enabled is false.
func NewProgress(f *os.File, total int64, enabled bool) *Progress {
	if !enabled {
		return nil
	}
	p := &Progress{f: f, stop: make(chan struct{})}
	p.total.Store(total)
	empty := ""
	p.label.Store(&empty)
	p.wg.Add(1)
	go p.loop()
	return p
}

// SetLabel sets the text shown next to the bar (the current row).
func (p *Progress) SetLabel(s string) {
	if p != nil {
		p.label.Store(&s)
	}
}

// Add advances the bar by n units.
func (p *Progress) Add(n int64) {
	if p != nil {
		p.done.Add(n)
	}
}

// Done stops drawing and clears the line.
func (p *Progress) Done() {
	if p == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	fmt.Fprint(p.f, "\r\033[K")
}

func (p *Progress) loop() {
	defer p.wg.Done()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.draw()
		}
	}
}

func (p *Progress) draw() {
	total, done := p.total.Load(), p.done.Load()
	frac := 0.0
	if total > 0 {
		frac = min(1, float64(done)/float64(total))
	}
	const w = 30
	n := int(frac * w)
	fmt.Fprintf(p.f, "\r\033[K[%s%s] %3.0f%% %s", strings.Repeat("#", n), strings.Repeat(".", w-n), frac*100, *p.label.Load())
}
