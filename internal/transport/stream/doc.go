// Package stream is the shared reader of every byte-stream transport (unix
// stream sockets, TCP, FIFOs, and later stdin and captured child output).
//
// A Reader splits the bytes of one stream into records with a
// framing.Stream (newline, NUL or RFC 6587 octet-counted frames; a frame
// longer than Options.MaxRecord is emitted in pieces flagged truncated and
// continuation; an unterminated last frame at EOF is kept, flagged
// partial), encodes each into the current pipeline.Batch and submits
// batches. No received byte is discarded: every byte ends up in a record or
// in framing, except what was still buffered when the hard stop refused a
// submit, which is counted in dropped_bytes_total{cause="drain_timeout"}.
//
// A batch is submitted when it reaches Deps.BatchBytes or when the read
// buffer holds no further complete record, i.e. before the next read that may
// block: latency stays low at low rates and batches grow at high rates.
// Metrics are accumulated locally and added once per batch.
//
// # Concurrency and lifetimes
//
// A Reader belongs to one goroutine (one connection) and is not safe for
// concurrent use. The *record.Meta handed to it is owned by that goroutine as
// well: the Reader writes Meta.RecvNS once per read.
//
// ServeListener runs the accept loop shared by unix and tcp listeners: one
// goroutine per connection, so a connection sending garbage or stalling
// cannot hold up the others, and the shutdown drain of the transport package
// contract (stop accepting, read each open connection for at most
// Options.DrainGrace, submit, wait, close).
package stream
