// Package stream is the shared read path of every byte-stream transport:
// connections of unix stream sockets and TCP, and the pipes of FIFOs,
// stdin and a captured child's output.
//
// Framing: a framing.Stream splits each stream into records (newline, NUL
// or RFC 6587 octet-counted frames; a frame longer than Options.MaxRecord
// is emitted in pieces flagged truncated and continuation; an unterminated
// last frame at EOF is kept, flagged partial), and every record goes to the
// sink (package sink), which encodes, counts and batches it. No received
// byte is discarded: every byte ends up in a record or in framing; what the
// hard stop makes the sink give up is counted there, in records and bytes.
//
// Connections (ServeListener) run on the event loops (package evloop; ADR
// 0016): the accept goroutine reserves what a connection needs (a slot, a
// descriptor; ADR 0052), takes it with accept4 and hands its fd to a
// loop, which reads it when epoll says it is readable. An idle
// connection is an fd in an epoll set and a small struct: no goroutine, no
// thread, no read buffer. Each loop keeps one outlet per listener: an
// Emitter whose batch collects the records of every connection read in one
// round and is handed over at the end of the round (or when full). A
// connection holds a buffer only while a frame is incomplete, charged to
// the budget shared by all listeners (Options.MaxPartialBytes). At
// Options.MaxConns, or short of descriptors, the accept loop stops
// accepting and new connections wait in the kernel's backlog (ADR 0017,
// ADR 0052). Shutdown: stop accepting, shut each connection's read side,
// read what it holds for at most Options.DrainGrace, hand it over, close.
//
// Pipes (Reader, Serve) are read by one goroutine each: Reader keeps an
// incomplete trailing frame between calls of ReadFrom, so a source can
// switch from a blocking to a draining read (DrainReader) without losing or
// splitting a record. Its Emitter hands a batch over when it is full and
// before every read that may block, so latency stays low at low rates and
// batches grow at high rates.
//
// # Concurrency and lifetimes
//
// A Reader belongs to one goroutine and is not safe for concurrent use. The
// *record.Meta handed to it is owned by that goroutine as well: the Reader
// writes Meta.RecvNS once per read. A connection's state belongs to its
// loop's goroutine once attached.
package stream
