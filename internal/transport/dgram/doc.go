// Package dgram is the shared receive path of the datagram transports
// (unixgram, udp).
//
// A Receiver owns one bound datagram socket. It reads with recvmmsg(2), up to
// Config.Vec datagrams per system call, into buffers laid out once at
// construction (mmsghdr, iovec, control and address buffers), so the steady
// state allocates nothing per datagram. When recvmmsg returns EAGAIN the
// goroutine parks in Go's netpoller (syscall.RawConn.Read), it never spins.
//
// Framing (package framing): one datagram is one record, newlines
// included, as in rsyslog and syslog-ng; one trailing NUL and one trailing
// newline are removed. A datagram that begins with the record separator
// 0x1E is an RFC 7464 sequence of records (how our client packs several
// records into one datagram). A datagram longer than the receive slot
// (Options.MaxRecord, at most the transport's largest datagram) is cut by
// the kernel: the record is kept flagged truncated, and the bytes cut off,
// which MSG_TRUNC lets us measure, are counted in
// dropped_bytes_total{cause="oversize"}. bytes_in_total counts whole
// datagrams, cut bytes included.
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
