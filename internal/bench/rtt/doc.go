// Package rtt measures the ping-pong round trip of one payload each way over
// each local IPC mechanism (seed 004's pipe latency study, seed 001's bench,
// bench2, bench3 and bench4), side by side with a C reference.
//
// Shape of a measurement: the measuring side (this process) starts an echo
// side (a child process: the same binary re-executed with a hidden
// subcommand, see EchoMain), waits for it to report ready over a control
// pipe, runs Warmup untimed and Iterations timed round trips, and collects
// the child's own report (CPU, context switches) when it exits.
// "pipe-inproc" and "shm-serial" have no child: one thread plays both
// sides; "shm-1core-threads" has an echo thread in this process instead
// (threads.go says why seed 001's one-core experiment has three rows).
//
// Every mechanism is measured in each placement of Options.Placements
// (default: both sides pinned to one CPU, then to two), and every row says
// where it ran and in which scheduling class (ADR 0038).
//
// Why the measuring code looks the way it does, so Go's figure is comparable
// with C's (cref/src/pingpong.c):
//   - Each row runs on a goroutine locked to its OS thread
//     (runtime.LockOSThread) that never unlocks, so the pinning and
//     SCHED_FIFO applied to that thread die with it when the row ends.
//   - I/O is read(2)/write(2) (mq_timedsend/receive, futex) on blocking
//     file descriptors, not os.File or net.Conn: the netpoller would turn
//     each blocking read into EAGAIN + epoll wait + goroutine wake-up, which
//     measures Go's scheduler rather than the IPC mechanism.
//   - Those calls are raw (unix.RawSyscall), bypassing the runtime's
//     entersyscall/exitsyscall; across cores this was worth ~15-25% of the
//     median (rawchan.IO.Raw explains why and how raw blocking calls are kept
//     bounded). Options.GoSyscalls switches back to measure the difference.
//   - Time is read with time.Since(epoch), one vDSO clock_gettime call
//     (time.Now reads two clocks), and nothing is allocated in the loop.
//
// Concurrency: Run is not safe for concurrent use with itself (the rows
// would compete for the same CPUs). EchoMain is meant to be the whole life
// of a child process.
package rtt
