// Package rawchan is the raw channel the lab's ping-pong experiments
// measure (rtt, and latency's raw mode): a connected pair of descriptors
// per socket mechanism (Dial), and whole messages moved over a descriptor
// with read(2) and write(2) (IO), which both the measuring side and the
// echo child use, and how that echo child is started and reported on
// (ChildSpec, Child). bufsweep takes its socket pairs from here too:
// DialTCP's options keep Nagle on and put a proxy between the ends.
//
// Why read(2)/write(2) on plain descriptors and not net.Conn: the
// netpoller would turn each blocking read into EAGAIN + epoll wait +
// goroutine wake-up, which measures Go's scheduler rather than the
// mechanism.
//
// Concurrency: Dial and a Child's methods are safe for concurrent use. An
// IO value is plain data; Send and Recv on one descriptor must not run
// concurrently with themselves (a stream message could interleave).
package rawchan
