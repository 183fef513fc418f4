package stream

// Reads is the number of data-returning reads of connections so far.
func Reads() int64 { return reads.Load() }
