// Package ackwire is the acknowledged mode of stream sockets (unix stream,
// TCP), shared by the aggregator's stream listeners and the Go client.
//
// A client that wants acknowledgements makes Hello, followed by a newline,
// the first line of its connection. A listener that knows the mode answers
// at once with an acknowledgement of 0, and from then on writes an
// acknowledgement each time records of the connection reach the output: a
// Size-byte little-endian count of the bytes of the stream after the hello
// line whose records are written (after write(2), see pipeline.Completer).
// The count only grows, ends at a frame boundary (a record longer than
// --max-record is written in pieces, so a count can end inside what the
// client sent as one record), and a later one covers every earlier one.
//
// A client that never sends the hello sees no change: the aggregator never
// writes to its connection. An aggregator that does not know the mode takes
// the hello for a record and sends nothing; the client notices the missing
// first acknowledgement.
package ackwire

import "encoding/binary"

// Hello is the first line of an acknowledged connection (without its
// newline). The record separator 0x1E in front cannot start a syslog or JSON
// line, so no ordinary client sends it by accident.
const Hello = "\x1elogagg-ack/1"

// Size is the length of one acknowledgement.
const Size = 8

// Put encodes an acknowledgement of n bytes into b (at least Size long).
func Put(b []byte, n uint64) { binary.LittleEndian.PutUint64(b, n) }

// Get decodes the acknowledgement at the start of b.
func Get(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
