// Package stream is the shared reader of every byte-stream transport (unix
// stream sockets, TCP, FIFOs, and later stdin and captured child output).
//
// A Reader splits the bytes of one stream into records, encodes each into
// the current pipeline.Batch and submits batches. Framing, per record:
//
//   - newline-delimited by default; empty lines are skipped;
//   - RFC 6587 octet counting when enabled and the record starts with 1-9
//     digits, a space and '<' (octet counting only carries syslog, and
//     requiring '<' keeps plain lines such as "200 OK" newline-framed);
//   - a record longer than Options.MaxRecord keeps its first MaxRecord bytes,
//     flagged truncated; the rest of the line (or frame) is discarded;
//   - a nonsensical octet count (e.g. 0 or a leading zero) flags the line
//     "framing" and resynchronises at the next newline, keeping the line;
//   - at the end of the stream an unterminated last line is kept, flagged
//     partial.
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
