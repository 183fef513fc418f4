// Package otlp is the OpenTelemetry (OTLP) logs receiver: the LogsService
// over gRPC and OTLP/HTTP, on TCP or on a unix stream socket.
//
//	otlp://127.0.0.1:4317                 gRPC (an empty host is 127.0.0.1, no port is 4317)
//	otlphttp://127.0.0.1:4318             HTTP: POST /v1/logs, protobuf or JSON, gzip, zstd or none
//	otlp+unix:///run/logagg/otlp.sock     gRPC on a unix socket (clients dial unix:///run/logagg/otlp.sock)
//	otlphttp+unix:///run/logagg/otlp-http.sock
//	…?ack=written&max_request=4MiB&max_inflight=16MiB&timeout=10s
//
// Each LogRecord becomes one record: a JSON object rendered straight from
// the protobuf (Decoder; docs/records.md has the mapping) that the sink
// encodes like any JSON record, adding agg. OTLP/JSON bodies are turned
// into protobuf first (by the Collector's pdata), so both encodings share
// one mapping.
//
// # What a reply means
//
// Success means every record of the request that is not named in a partial
// success is in the outputs' queues (ack=queued, the default) or written
// to every output it goes to (ack=written), or was dropped on purpose by a
// rule. A request is never answered with success for records that were
// thrown away:
//
//   - Backpressure: the bytes of requests being received or whose records
//     are not yet written are bounded (max_inflight; room is taken before
//     a body is read). A request that finds no room within a second is
//     refused before anything of it is read, with
//     RESOURCE_EXHAUSTED and RetryInfo (gRPC) or 429 and Retry-After
//     (HTTP), which the SDKs and the Collector retry after the delay. A
//     request admitted while an output's queue is full waits in the hand-
//     over, as a stream producer waits in write(2).
//   - A request that is not well formed (malformed protobuf or JSON, a
//     string that is not UTF-8, values nested deeper than 32 levels, a
//     trace id of the wrong length) is refused whole with INVALID_ARGUMENT
//     or 400, a body over max_request with RESOURCE_EXHAUSTED or 413, a
//     body of another type with 415, a client that does not send its
//     request within the timeout with DEADLINE_EXCEEDED or 408. Each is
//     counted in logagg_requests_refused_total{cause}.
//   - One record longer than --max-record once rendered is left out and
//     named in a partial success (rejected_log_records, error_message),
//     counted in logagg_records_rejected_total{cause="record_size"}.
//   - At the hard stop the records still being handed over are counted
//     dropped (drain_timeout) by the sink, and the request is answered
//     UNAVAILABLE or 503: the client sends them again.
//
// # Peers
//
// Records carry agg.peer: on a unix socket the pid, uid and gid of the
// connecting process from SO_PEERCRED (via "kernel"); on loopback TCP the
// process package peerid finds (via "lookup") and the address. The peer
// is found once per connection, when it is accepted.
//
// # Lifetimes and concurrency
//
// New binds; Run serves until its context ends, then stops accepting, lets
// the requests in progress finish for at most Options.DrainGrace (their
// records handed over, or counted at the hard stop), closes every
// connection and returns once no handler runs. Requests are served
// concurrently, each on its own goroutine (gRPC's or net/http's); a
// request takes an idle Emitter (the sink's per-goroutine encoder) for as
// long as it hands records over, so Emitters are never shared. Close
// releases a listener whose Run was never called.
package otlp
