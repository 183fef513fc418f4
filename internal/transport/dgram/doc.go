// Package dgram is the shared receive path of the datagram transports
// (unixgram, udp).
//
// A Receiver owns one bound datagram socket. It reads with recvmmsg(2), up to
// Config.Vec datagrams per system call, into buffers laid out once at
// construction (mmsghdr, iovec, control and address buffers), so the steady
// state allocates nothing per datagram. When recvmmsg returns EAGAIN the
// goroutine parks in Go's netpoller (syscall.RawConn.Read), it never spins.
//
// Framing: one datagram is one record, or several if it holds several
// newline-separated records. Each newline-terminated piece is a record, empty
// pieces are skipped, and a trailing piece without a newline is a normal
// record (a datagram cannot be partial). A datagram longer than
// Options.MaxRecord is cut to MaxRecord bytes (the kernel reports MSG_TRUNC);
// the last record taken from it is flagged record.FlagTruncated.
//
// Loss accounting: SO_RXQ_OVFL makes the kernel attach its cumulative drop
// counter for the socket to each datagram; the increase is exported as
// dropped_total{cause="kernel_rxq_ovfl"}. The counter a datagram carries is
// the value when it was queued, so drops after the last queued datagram would
// stay invisible until the next one arrives. The Receiver therefore also reads
// the counter directly (getsockopt SO_MEMINFO) each time it has emptied the
// queue after reading data, and once more at shutdown: after every EAGAIN all
// drops so far are counted. A drop requires a full queue, and a full queue
// wakes the reader, so no drop stays uncounted for long.
//
// Receive buffer: Options.RcvBuf is requested with SO_RCVBUFFORCE (root),
// falling back to SO_RCVBUF (capped by net.core.rmem_max); the value the
// kernel granted (getsockopt, which reports the doubled bookkeeping value) is
// logged and exported as socket_receive_buffer_bytes.
//
// Batching: records are encoded into one pipeline.Batch, submitted after
// every recvmmsg call that returned data and whenever the batch reaches
// Deps.BatchBytes. While Submit blocks (the queue is full) nothing is read;
// the kernel then drops datagrams and counts them, which is the only honest
// thing a datagram receiver can do.
//
// # Concurrency and lifetimes
//
// New configures the socket and allocates buffers; Run is called at most once
// and owns the socket until it returns, after which the socket is closed.
// Close closes the socket of a Receiver whose Run was never called and is
// safe to call after Run returned. Stats may be called from any goroutine.
//
// # Shutdown
//
// When ctx ends, Run sets a read deadline in the past, which wakes the parked
// reader. Config.StopArrivals (unixgram: shutdown(SHUT_RD), so senders get
// EPIPE instead of queueing into a socket about to close) is applied, then
// the queue is drained with non-blocking recvmmsg until EAGAIN, for at most
// Options.DrainGrace (UDP cannot refuse new arrivals, so a flood must not
// hold the drain forever) and never past Deps.HardStop. Everything read is
// submitted, the drop counter is reconciled, the socket closed, and Run
// returns nil.
package dgram
