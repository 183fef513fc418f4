package stream

// DetachedReads is the number of data-returning reads on detached
// connections so far.
func DetachedReads() int64 { return detachedReads.Load() }
