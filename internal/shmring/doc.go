// Package shmring is a single-producer single-consumer ring of
// length-prefixed frames in shared memory (a sealed memfd), used by the
// shm:// transport: the aggregator creates one ring per producer and hands
// its fd over a unix control socket with SCM_RIGHTS; the producer maps it.
//
// # Layout (little-endian, offsets in bytes)
//
//	   0  magic "LGSHMRG1", version, header size, data size, max frame
//	 128  tail   uint64  next byte the writer will write (monotonic, never wraps)
//	 256  head   uint64  next byte the reader will read (monotonic)
//	 384  readerSleeping uint32  futex word: 1 while the reader sleeps
//	 512  writerWaiting  uint32  futex word: 1 while the writer waits for space
//	 640  closed         uint32  1 once the reader will take no more frames
//	4096  data area, Size bytes (a power of two)
//
// Each word the two sides write lives on its own 128-byte block so that
// the writer's tail stores and the reader's head stores do not share a
// cache line (or an adjacent-line prefetch pair).
//
// A frame is a uint32 payload length followed by the payload, padded to 8
// bytes. A frame never wraps: when it does not fit before the end of the
// data area the writer puts a pad marker (length 0xFFFFFFFF) there and
// continues at offset 0.
//
// # Commit and visibility
//
// The writer copies the frame into the ring and only then publishes the new
// tail with an atomic store. The reader only reads below the tail it
// loaded, so a frame is visible only once complete: a producer killed
// mid-write never yields a torn record, its partial frame is simply never
// published.
//
// # Sleeping and waking (Dekker style)
//
// The reader spins for a budget of polls, then sets readerSleeping, checks
// the tail again and only then sleeps in FUTEX_WAIT on readerSleeping. The
// writer publishes the tail and then checks readerSleeping; it makes the
// FUTEX_WAKE syscall only when the flag is set. Go's atomics are
// sequentially consistent, so one side always sees the other's store and no
// wake-up is lost. The full-ring case is the mirror image on writerWaiting:
// the writer waits (spin, then futex) until the reader frees space, so
// backpressure holds and nothing is dropped. The futexes are shared (not
// FUTEX_PRIVATE) because the two sides are different processes. Both waits
// are bounded (writer 50 ms, so that a dead aggregator is noticed through
// the control socket; reader 500 ms, a guard against a lost wake-up), and
// a reader that slept through a timeout does not spin again until data
// comes, so an idle ring costs nothing measurable.
//
// # Trust
//
// The reader never trusts the shared memory: the producer can write
// anything into it. Every length and index is bounds-checked (ErrCorrupt),
// payloads are copied out before use so later scribbles cannot change a
// record being encoded, and the memfd is sealed against shrinking so the
// producer cannot make the aggregator fault (SIGBUS) by truncating it.
//
// # Concurrency
//
// A Writer is used by one goroutine at a time (callers serialise). A
// Reader's Poll and Wait are called by one goroutine; Wake and MarkClosed
// may be called from any goroutine, even concurrently with Close. Close must
// not run concurrently with Poll or Wait.
//
// # Lifetimes
//
// The aggregator's Reader owns the memfd until DropFD (after Send) and the
// mapping until Close. A Writer owns its mapping and control connection
// until Close; closing the control connection (or the producer dying) is
// what tells the aggregator to drain the ring and release it.
package shmring
