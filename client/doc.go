// Package client sends log records to a logagg aggregator from Go programs.
//
// Dial a listener URL (unix:///tmp/log.sock, unixgram://…, tcp://127.0.0.1:9000,
// udp://…, fifo:///tmp/log_fifo, shm://…, mq:///…), write records, and Close.
// A slog.Handler is provided so that a program's log/slog output goes to the
// aggregator with a few lines.
//
// # Writers
//
// Dial returns a *Writer bound to one connection (redialed on failure when
// WithReconnect is set, for stream transports only). Every Writer method is
// safe for concurrent use: one mutex serialises formatting and writing, so
// records from different goroutines are never interleaved. Close flushes
// and releases the connection; the Writer is unusable afterwards.
//
// The hot path (Log, WriteRecord, Write) formats into buffers the Writer
// reuses and makes no allocation per record in any format.
//
// # Delivery
//
// Sent counts records completely handed to the transport (the kernel);
// records waiting in a WithBuffer buffer are not yet sent. Failed counts
// records dropped after a write error that was not retried. Stream
// transports with WithReconnect are at-least-once across a reconnect: the
// record that straddled the failure is resent whole, but records the
// kernel accepted for a peer that then vanished without reading them are
// lost, and only a peer-close watcher (a goroutine blocked in Read) narrows
// that window for TCP, whose first write after a close still succeeds.
// Message transports (unixgram, udp) send each record or packed group of
// whole records as one datagram and never redial.
//
// Two modes survive the aggregator's crash (SIGKILL, OOM kill) without
// losing what the producer counts as delivered (Delivered), at the price of
// duplicates:
//   - shm with WithReconnect: the aggregator releases ring space only once
//     the frames' records are written to its output, so the ring keeps
//     the rest; a Writer whose aggregator died dials again and offers the
//     new one every unreleased frame, and Close waits until all are
//     released.
//   - unix stream and TCP with WithAck (and WithReconnect): the aggregator
//     acknowledges records once written; the Writer keeps the rest (up to
//     a window), sends them again after a reconnect, and Close waits for
//     the acknowledgements.
//
// # Trust
//
// A Writer writes only to the aggregator. Before anything is written (or,
// for shm, before the ring is received), the socket, FIFO or queue it
// reached must belong to a user the aggregator may run as: root, this
// process's own user, the packaged service's user "logagg" where it
// exists, and any given with WithAggregatorUID. A unix stream or shm
// socket's file is checked (lstat, and a symbolic link's target), then
// the process that listens on it (SO_PEERCRED); a unix datagram socket's
// file; a FIFO or POSIX queue through the descriptor opened (fstat). In a
// shared directory such as /tmp, or for a queue name, which is global,
// another user could otherwise create the address first and read every
// record. A refusal is a DialError wrapping ErrUntrusted that names the
// owner; a redial is checked the same way. TCP and UDP addresses have no
// owner and are not checked.
//
// # Transports
//
// Each transport file registers a DialFunc for its scheme from init() with
// registerDialer (see transport.go). A DialFunc returns maxMessage 0 for a
// byte stream and the largest message size otherwise; the Writer derives
// framing, buffering and reconnect behaviour from that alone, so a new
// transport needs no change elsewhere.
package client

import "errors"

// ErrUnknownScheme is returned by Dial for a URL scheme the client cannot dial.
var ErrUnknownScheme = errors.New("unknown transport scheme")
