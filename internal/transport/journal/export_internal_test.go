package journal

import "time"

// SetWatchEvery makes the file watcher look every d; it returns a func
// that restores it.
func SetWatchEvery(d time.Duration) func() {
	old := watchEvery
	watchEvery = d
	return func() { watchEvery = old }
}
