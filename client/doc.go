// Package client sends log records to a logagg aggregator from Go programs.
//
// Dial a listener URL (unix:///tmp/log.sock, unixgram://…, tcp://127.0.0.1:9000,
// udp://…, fifo:///tmp/log_fifo, shm://…, mq:///…), write records, and Close.
// A slog.Handler is provided so that a program's log/slog output goes to the
// aggregator with a few lines.
package client

import "errors"

// ErrUnknownScheme is returned by Dial for a URL scheme the client cannot dial.
var ErrUnknownScheme = errors.New("unknown transport scheme")
