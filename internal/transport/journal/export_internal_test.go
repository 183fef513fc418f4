package journal

import (
	"time"

	"github.com/ipclab/logagg/internal/record"
)

// SetWatchEvery makes the file watcher look every d; it returns a func
// that restores it.
func SetWatchEvery(d time.Duration) func() {
	old := watchEvery
	watchEvery = d
	return func() { watchEvery = old }
}

// Renderer is the renderer, for benchmarks.
type Renderer struct{ r renderer }

// Render renders e's payload.
func (r *Renderer) Render(e *Entry) ([]byte, record.Peer, record.Flags) {
	p, rd := r.r.render(e)
	return p, rd.peer, rd.flags
}

// SetReadCoalesce sets the pause after a read that emptied journalctl's
// pipe; it returns a func that restores it.
func SetReadCoalesce(d time.Duration) func() {
	old := readCoalesce
	readCoalesce = d
	return func() { readCoalesce = old }
}

// Whole reports whether e's fields add up to the hash in its cursor.
func Whole(e *Entry) bool {
	_, ok := check(e)
	return ok
}
