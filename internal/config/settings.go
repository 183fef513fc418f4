package config

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/ipclab/logagg/internal/forward/kafka"
	otlpfwd "github.com/ipclab/logagg/internal/forward/otlp"
)

// Setting declares one setting once: its YAML key, its flag, its help, the
// field it fills and how its default reads. The flags of every command,
// their --help, check-config --print and the table in docs/configuration.md
// all come from Settings (reference_test.go fails when the docs disagree).
type Setting struct {
	// Key is the YAML path (output.max_size); "" for a flag that is not
	// configuration (--config).
	Key string
	// Flag is the flag's name without dashes; "" for a key only the file
	// sets. Short is the name `aggregator forward` gives it, if any.
	Flag, Short string
	// Arg names the flag's value in --help (FILE, SIZE); "" for a switch.
	Arg string
	// Help is the one line --help prints.
	Help string
	// Doc is the docs table's text (Markdown); "" means Help.
	Doc string
	// Default is how the docs and --help show the default when the value
	// of Default() does not say it well ("0 (one per CPU)"); "" means
	// that value.
	Default string
	// Kafka marks a setting of forward.kafka: giving its flag turns
	// forwarding on.
	Kafka bool
	// OTLP marks a setting of forward.otlp: giving its flag turns OTLP
	// forwarding on.
	OTLP bool
	// field returns the setting's field of c as a flag.Value (allocating
	// forward.kafka when it is one of its settings).
	field func(c *Config) flag.Value
}

// Value is the setting's value in c, as a flag would give it ("" when it
// is a forward.kafka setting and forwarding is off).
func (s *Setting) Value(c Config) string {
	if s.field == nil || (s.Kafka && c.Forward.Kafka == nil) || (s.OTLP && c.Forward.OTLP == nil) {
		return ""
	}
	return s.field(&c).String()
}

// DefaultText is how the default reads in --help and the docs.
func (s *Setting) DefaultText() string {
	if s.Default != "" || s.field == nil {
		return s.Default
	}
	c := Default()
	return s.field(&c).String()
}

// defaultIn is the default in a command that starts from base.
func (s *Setting) defaultIn(base Config) string {
	if s.Default != "" || s.field == nil {
		return s.Default
	}
	base.Forward.Kafka = nil // never share the base's
	base.Forward.OTLP = nil
	return s.field(&base).String()
}

// Set parses v into the setting's field of c.
func (s *Setting) Set(c *Config, v string) error {
	if s.field == nil {
		return fmt.Errorf("%s is set in the configuration file", s.Key)
	}
	return s.field(c).Set(v)
}

func (s *Setting) isBool() bool {
	if s.field == nil {
		return false
	}
	var c Config
	b, ok := s.field(&c).(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// kafka returns forward.kafka, creating it (with the default topic) when
// forwarding was off.
func (c *Config) kafka() *kafka.Config {
	if c.Forward.Kafka == nil {
		c.Forward.Kafka = &kafka.Config{Topic: DefaultKafkaTopic}
	}
	return c.Forward.Kafka
}

// otlp returns forward.otlp, creating it when OTLP forwarding was off.
func (c *Config) otlp() *otlpfwd.Config {
	if c.Forward.OTLP == nil {
		c.Forward.OTLP = &otlpfwd.Config{}
	}
	return c.Forward.OTLP
}

// DefaultKafkaTopic is the topic when forwarding is turned on without one.
const DefaultKafkaTopic = "logagg"

// Settings is every setting, in the order of --help and the docs.
var Settings = []*Setting{
	{Flag: "config", Arg: "FILE", Help: "YAML configuration file; flags given explicitly override it",
		Doc: "YAML file that can say everything the flags say ([below](#the-configuration-file)); flags given explicitly override it"},
	{Key: "listen", Flag: "listen", Arg: "URL",
		Help:  "listen URL (repeatable): unix:///path, unixgram:///path, tcp://host:port, udp://host:port, fifo:///path, ...",
		Doc:   "listen URL, repeatable (a list in YAML): `unix:///path`, `unixgram:///path`, `tcp://host:port`, `udp://host:port`, `fifo:///path`, and the URLs of [transports.md](transports.md); TCP/UDP with an empty host bind 127.0.0.1; `?fdname=NAME` serves the socket systemd passes under that name (see [service.md](service.md#socket-activation))",
		field: func(c *Config) flag.Value { return (*listValue)(&c.Listen) }},

	{Key: "output.path", Flag: "output", Arg: "FILE", Help: "output JSON-lines file",
		Doc:   "the JSON-lines output; a non-regular file such as `/dev/null` is accepted (no fsync, rotation or disk cap)",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.Output.Path) }},
	{Key: "output.max_size", Flag: "max-size", Arg: "SIZE", Help: "rotate the output at this size (e.g. 128MiB; 0 = never)",
		Doc:   "rotate the output at this size (0 = never); rotated segments are `FILE.00000001`, `FILE.00000002`, …",
		field: func(c *Config) flag.Value { return &c.Output.MaxSize }},
	{Key: "output.max_files", Flag: "max-files", Arg: "N", Help: "rotated segments to keep (0 = all)",
		field: func(c *Config) flag.Value { return (*intValue)(&c.Output.MaxFiles) }},
	{Key: "output.fsync", Flag: "fsync", Arg: "POLICY", Help: "when to fsync: never, batch, or interval=DURATION",
		Doc:   "`never` (only at rotation and shutdown), `batch` (after every write), `interval=DUR`",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.Output.Fsync) }},
	{Key: "output.direct_io", Flag: "direct-io",
		Help:  "write whole blocks of the output with O_DIRECT, bypassing the page cache (falls back to buffered where refused; =false to turn off)",
		Doc:   "write whole 4 KiB blocks of the output with `O_DIRECT`, bypassing the page cache; the last partial block goes through the page cache, so every record is readable at once. Falls back to buffered writes where refused; `--direct-io=false` turns it off ([ADR 0015](adr/0015-direct-i-o-output.md))",
		field: func(c *Config) flag.Value { return (*boolValue)(&c.Output.DirectIO) }},
	{Key: "output.type", Arg: "TYPE", Default: OutputFile,
		Help:  "file, or discard: records routed to the output are counted and dropped",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.Output.Type) }},
	{Key: "output.when_full", Arg: "POLICY", Default: "block",
		Help:  "while the output's queue is full: block (hold producers back) or drop (counted, the other outputs go on)",
		Doc:   "while the output's queue is full (a full disk, a slow device): `block` holds producers back, `drop` drops its records, counted (`output_dropped_total{cause=\"output_full\"}`), so the other outputs go on; an output named under `outputs` drops by default ([rules.md](rules.md#outputs))",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.Output.WhenFull) }},
	{Key: "outputs", Arg: "MAP",
		Help: "more outputs by name, each with the keys of output (path, max_size, fsync, type, when_full, ...)",
		Doc:  "more outputs by name, each with the keys of `output` (`path`, `max_size`, `fsync`, `type`, `when_full`, …): see [rules.md](rules.md#outputs)"},
	{Key: "rules", Arg: "LIST",
		Help: "what goes where: matches and actions, in order",
		Doc:  "what goes where: an ordered list of rules (match, then route, drop, stop, rate_limit, set, remove, rename, redact): see [rules.md](rules.md)"},
	{Key: "unrouted", Arg: "OUTPUT", Default: MainOutput,
		Help:  "where records no rule routes go: an output's name, or discard",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.Unrouted) }},
	{Key: "output.max_disk", Flag: "max-disk", Arg: "SIZE", Default: "0 (no cap)",
		Help:  "cap on the bytes of all output segments (0 = none); see docs/kafka.md for the policy",
		Doc:   "cap on all segments, at least twice `--max-size` (see [kafka.md](kafka.md#disk-policy) for the policy)",
		field: func(c *Config) flag.Value { return &c.Output.MaxDisk }},

	{Key: "metrics", Flag: "metrics", Arg: "ADDR", Default: "off",
		Help:  "serve Prometheus /metrics and /healthz on host:port (an empty host is 127.0.0.1)",
		Doc:   "serve Prometheus `/metrics` and `/healthz` on `host:port` ([metrics.md](metrics.md)); an empty host (`:9100`) binds 127.0.0.1, as for listeners (`0.0.0.0:9100` for every interface)",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.Metrics) }},
	{Key: "pprof", Flag: "pprof",
		Help:  "also serve Go's profiler (/debug/pprof/) on the metrics endpoint; unauthenticated, so off by default",
		Doc:   "also serve Go's profiler (`/debug/pprof/`: goroutine dumps, CPU profiles) on the metrics endpoint; unauthenticated, so off unless asked for; needs `--metrics`",
		field: func(c *Config) flag.Value { return (*boolValue)(&c.Pprof) }},

	{Key: "state_dir", Flag: "state-dir", Arg: "DIR", Default: "the main output's directory",
		Help:  "where the journal and file inputs keep their checkpoints",
		Doc:   "where inputs that read what others write (the journal, files) keep their durable checkpoints, one file per input",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.StateDir) }},
	{Key: "control", Flag: "control", Arg: "PATH", Default: "off",
		Help:  "serve the control socket (aggregator tap) at this path; only the daemon's user and root may connect",
		Doc:   "serve the control socket at this path, for `aggregator tap` ([rules.md](rules.md#tap)); created with mode 0600, and a connection from another user than the daemon's or root is refused",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.Control) }},
	{Key: "limits.memory", Flag: "memory", Arg: "SIZE",
		Help:  "the daemon's memory budget: queues, partial frames, connections, datagram vectors, shm rings and the Go runtime's soft limit are derived from it",
		Doc:   "the daemon's memory budget, which its resident set stays within: the queues, the partial-frame budget, the connections' share (at it listeners stop accepting, and file inputs follow no new file), datagram receive vectors, shm rings and the Go runtime's soft limit are derived from it and reported at start-up and in `logagg_memory_budget_bytes`; `max_partial` and `queue.batches`, when set, take their own size instead of their share ([memory.md](memory.md)); at least 16 MiB",
		field: func(c *Config) flag.Value { return &c.Limits.Memory }},
	{Key: "limits.max_record", Flag: "max-record", Arg: "SIZE", Help: "truncate records longer than this size (flagged and counted)",
		Doc:   "longer records are written in pieces of at most this size, flagged `truncated` and `continuation` (a datagram longer than this is cut by the kernel: kept `truncated`, the rest counted in `dropped_bytes_total{cause=\"oversize\"}`); 64 B to 64 MiB",
		field: func(c *Config) flag.Value { return &c.Limits.MaxRecord }},
	{Key: "limits.max_conns", Flag: "max-conns", Arg: "N",
		Help:  "accept at most this many stream connections per listener at once; more wait in the listen backlog (0 = unlimited)",
		Doc:   "at most this many stream (and shm) connections per listener at once; at the limit the listener stops accepting, so further clients wait in the listen backlog with what they wrote (or see `connect` fail once it is full), never accepted and dropped (0 = unlimited: connections cost no thread, see [ADR 0017](adr/0017-at-the-connection-limit-stop-accepting.md))",
		field: func(c *Config) flag.Value { return (*intValue)(&c.Limits.MaxConns) }},
	{Key: "limits.max_partial", Flag: "max-partial", Arg: "SIZE", Default: "0 (its share of limits.memory)",
		Help:  "bound on the bytes all stream connections hold in incomplete records; past it the largest are written out, flagged truncated (0 = a share of --memory)",
		Doc:   "bound on the bytes all stream connections together hold in incomplete records; past it the largest are written out, flagged `truncated` (the rest follows as `continuation`); when set, not below `--max-record`; 0 takes its share of `limits.memory`",
		field: func(c *Config) flag.Value { return &c.Limits.MaxPartial }},
	{Key: "limits.event_loops", Flag: "event-loops", Arg: "N", Default: "0 (one per CPU)",
		Help:  "event loops serving connections (0 = one per CPU)",
		Doc:   "event loops (one thread each) that serve every connection and datagram socket (at most 256)",
		field: func(c *Config) flag.Value { return (*intValue)(&c.Limits.EventLoops) }},
	{Key: "limits.idle_timeout", Flag: "idle-timeout", Arg: "DUR", Default: "0 (never)",
		Help:  "close stream connections idle this long (default: never)",
		Doc:   "close stream connections and shm producers that send nothing for this long (a closed shm producer's next write fails with `ErrClosed`; a reconnecting client dials again)",
		field: func(c *Config) flag.Value { return (*durationValue)(&c.Limits.IdleTimeout) }},
	{Key: "limits.read_coalesce", Flag: "read-coalesce", Arg: "DUR",
		Help:  "pause this long after a short read on unix stream connections and UDP sockets, so writes collect instead of each waking us (0 = off)",
		Doc:   "pause this long after a short read on unix stream connections and UDP sockets, so a producer's writes collect instead of each waking the aggregator (adds at most one pause of latency; 0 = off; at most 100 ms; [ADR 0016](adr/0016-one-event-loop-per-cpu-and-why-reads-pause.md))",
		field: func(c *Config) flag.Value { return (*durationValue)(&c.Limits.ReadCoalesce) }},

	{Key: "sockets.mode", Flag: "socket-mode", Arg: "MODE", Help: "octal mode of created socket files and FIFOs",
		Doc:   "mode of created socket files, FIFOs and POSIX queues, set exactly whatever the umask",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.Sockets.Mode) }},
	{Key: "sockets.group", Flag: "socket-group", Arg: "GROUP", Help: "group (name or gid) of created socket files and FIFOs",
		Doc:   "group (name or gid) of created socket files, FIFOs and POSIX queues",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.Sockets.Group) }},
	{Key: "sockets.rcvbuf", Flag: "rcvbuf", Arg: "SIZE",
		Help:  "requested receive buffer size of unix sockets, UDP sockets and FIFOs (the granted value is logged and exported)",
		Doc:   "requested receive buffer of unix sockets, UDP sockets and FIFOs (pipe size); `SO_RCVBUFFORCE` is used as root, the granted size is logged and exported as `socket_receive_buffer_bytes`",
		field: func(c *Config) flag.Value { return &c.Sockets.RcvBuf }},
	{Key: "sockets.tcp_rcvbuf", Flag: "tcp-rcvbuf", Arg: "SIZE",
		Help:  "fixed receive buffer size of TCP connections (0 = the kernel's autotuning, which a fixed size turns off)",
		Doc:   "fixed receive buffer of TCP connections; 0 keeps the kernel's autotuning, which a fixed size turns off and which a producer sharing the aggregator's CPU needs ([ADR 0045](adr/0045-tcp-keeps-receive-buffer-autotuning.md))",
		field: func(c *Config) flag.Value { return &c.Sockets.TCPRcvBuf }},

	{Key: "queue.batches", Flag: "queue-batches", Arg: "N", Default: "0 (its share of limits.memory)",
		Help:  "batches of --batch-bytes each output's queue between listeners and writer holds (0 = a share of --memory)",
		Doc:   "size of each file output's queue between listeners and writer, in batches of `batch_bytes` (the queue is bounded in bytes: small batches take less); 0 takes its share of `limits.memory`",
		field: func(c *Config) flag.Value { return (*intValue)(&c.Queue.Batches) }},
	{Key: "queue.batch_bytes", Flag: "batch-bytes", Arg: "SIZE", Help: "size at which a listener hands a batch to the writer",
		Doc:   "size at which a listener hands a batch to the writer (at least 4 KiB)",
		field: func(c *Config) flag.Value { return &c.Queue.BatchBytes }},
	{Key: "drain_timeout", Flag: "drain-timeout", Arg: "DUR", Help: "bound on the shutdown drain (a second signal also ends it)",
		Doc:   "bound on the shutdown drain (a second signal also ends it); see [delivery.md](delivery.md#signals)",
		field: func(c *Config) flag.Value { return (*durationValue)(&c.DrainTimeout) }},
	{Key: "log_level", Flag: "log-level", Arg: "LEVEL", Help: "debug, info, warn or error (logs go to stderr)",
		Doc:   "`debug`, `info`, `warn`, `error` (to stderr)",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.LogLevel) }},

	{Key: "forward.kafka.from", Flag: "", Short: "from", Arg: "PATH", Kafka: true, Default: "output.path",
		Help:  "the log to ship: the aggregator's --output path, or a directory holding its default file",
		Doc:   "the segment log the forwarder ships (`aggregator forward --from`: also a directory holding `aggregated_logs.jsonl`)",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.kafka().From) }},
	{Key: "forward.kafka.output", Kafka: true, Default: MainOutput,
		Help:  "the output whose log the forwarder ships (a file output's name), unless forward.kafka.from names a log",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.kafka().Output) }},
	{Key: "forward.kafka.brokers", Flag: "forward-kafka", Short: "brokers", Arg: "BROKERS", Kafka: true, Default: "off",
		Help:  "forward every written record to these Kafka brokers (host:port,...)",
		Doc:   "the Kafka brokers to bootstrap from, `host:port`, comma-separated (a list in YAML); turns forwarding on ([kafka.md](kafka.md))",
		field: func(c *Config) flag.Value { return (*commaListValue)(&c.kafka().Brokers) }},
	{Key: "forward.kafka.topic", Flag: "kafka-topic", Short: "topic", Arg: "TOPIC", Kafka: true, Default: DefaultKafkaTopic,
		Help:  "Kafka topic",
		Doc:   "topic (auto-created if the broker allows)",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.kafka().Topic) }},
	{Key: "forward.kafka.key", Flag: "kafka-key", Short: "key", Arg: "KEY", Kafka: true, Default: kafka.KeyHost,
		Help:  "record key: host, source, producer or none",
		Doc:   "record key: `host`, `source`, `producer` (the `--seq` producer id) or `none`",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.kafka().Key) }},
	{Key: "forward.kafka.compression", Flag: "kafka-compression", Short: "compression", Arg: "CODEC", Kafka: true, Default: "lz4",
		Help:  "none, gzip, snappy, lz4 or zstd",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.kafka().Compression) }},
	{Key: "forward.kafka.linger", Flag: "kafka-linger", Short: "linger", Arg: "DUR", Kafka: true, Default: "5ms",
		Help:  "how long a produce batch waits to fill",
		field: func(c *Config) flag.Value { return (*durationValue)(&c.kafka().Linger) }},
	{Key: "forward.kafka.batch_max_bytes", Flag: "kafka-batch-bytes", Short: "batch-bytes", Arg: "BYTES", Kafka: true, Default: "1MiB",
		Help:  "maximum bytes of one produce batch",
		field: func(c *Config) flag.Value { return (*int32Value)(&c.kafka().BatchMaxBytes) }},
	{Key: "forward.kafka.max_in_flight", Flag: "kafka-max-in-flight", Short: "max-in-flight", Arg: "N", Kafka: true, Default: "100000",
		Help:  "records read from the log and not yet acknowledged by Kafka",
		Doc:   "records read from the log and not yet acknowledged by Kafka; past it the forwarder stops reading and the backlog stays on disk",
		field: func(c *Config) flag.Value { return (*intValue)(&c.kafka().MaxInFlight) }},
	{Key: "forward.kafka.checkpoint", Flag: "kafka-checkpoint", Short: "checkpoint", Arg: "FILE", Kafka: true, Default: "<output>.kafka.checkpoint",
		Help:  "the forwarder's checkpoint file",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.kafka().CheckpointPath) }},
	{Key: "forward.kafka.tls.enable", Flag: "kafka-tls", Short: "tls", Kafka: true,
		Help:  "connect to the brokers with TLS",
		Doc:   "connect to the brokers with TLS (any TLS file below, or skipping verification, also turns TLS on)",
		field: func(c *Config) flag.Value { return (*boolValue)(&c.kafka().TLS.Enable) }},
	{Key: "forward.kafka.tls.ca_file", Flag: "kafka-tls-ca", Short: "tls-ca", Arg: "FILE", Kafka: true,
		Help:  "CA certificate file for the brokers",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.kafka().TLS.CAFile) }},
	{Key: "forward.kafka.tls.cert_file", Flag: "kafka-tls-cert", Short: "tls-cert", Arg: "FILE", Kafka: true,
		Help:  "client certificate file",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.kafka().TLS.CertFile) }},
	{Key: "forward.kafka.tls.key_file", Flag: "kafka-tls-key", Short: "tls-key", Arg: "FILE", Kafka: true,
		Help:  "client key file",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.kafka().TLS.KeyFile) }},
	{Key: "forward.kafka.tls.insecure_skip_verify", Flag: "kafka-tls-insecure", Short: "tls-insecure", Kafka: true,
		Help:  "do not verify the brokers' certificates",
		field: func(c *Config) flag.Value { return (*boolValue)(&c.kafka().TLS.InsecureSkipVerify) }},
	{Key: "forward.kafka.tls.server_name", Kafka: true,
		Help:  "the name the brokers' certificates are checked against (Go's tls.Config.ServerName)",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.kafka().TLS.ServerName) }},
	{Key: "forward.kafka.sasl.mechanism", Flag: "kafka-sasl-mechanism", Short: "sasl-mechanism", Arg: "MECHANISM", Kafka: true, Default: "none",
		Help:  "plain, scram-sha-256 or scram-sha-512",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.kafka().SASL.Mechanism) }},
	{Key: "forward.kafka.sasl.user", Flag: "kafka-sasl-user", Short: "sasl-user", Arg: "USER", Kafka: true,
		Help:  "SASL user",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.kafka().SASL.User) }},
	{Key: "forward.kafka.sasl.password", Flag: "kafka-sasl-password", Short: "sasl-password", Arg: "PASSWORD", Kafka: true, Default: "$" + KafkaPasswordEnv,
		Help:  "SASL password (default $" + KafkaPasswordEnv + ", which keeps it out of ps)",
		Doc:   "SASL password; the environment variable keeps it out of `ps`",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.kafka().SASL.Password) }},
	{Key: "forward.kafka.client_id", Kafka: true, Default: "logagg",
		Help:  "the Kafka client id",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.kafka().ClientID) }},
	{Key: "forward.kafka.checkpoint_interval", Kafka: true, Default: "1s",
		Help:  "how often the acknowledged position is made durable: the window of possible duplicates after a crash",
		field: func(c *Config) flag.Value { return (*durationValue)(&c.kafka().CheckpointInterval) }},
	{Key: "forward.kafka.drain_timeout", Short: "drain-timeout", Arg: "DUR", Kafka: true, Default: "drain_timeout",
		Help:  "on stop, how long in-flight records get to be acknowledged; the rest are sent again on the next start",
		field: func(c *Config) flag.Value { return (*durationValue)(&c.kafka().DrainTimeout) }},
	{Key: "forward.kafka.poll", Kafka: true, Default: "20ms",
		Help:  "how often the log is checked for new lines",
		field: func(c *Config) flag.Value { return (*durationValue)(&c.kafka().Poll) }},
	{Key: "forward.kafka.hostname", Kafka: true, Default: "the host's name",
		Help:  "the key for key: host",
		Doc:   "the key for `key: host`",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.kafka().Hostname) }},

	{Key: "forward.otlp.endpoint", Flag: "forward-otlp", Arg: "ENDPOINT", OTLP: true, Default: "off",
		Help:  "forward every written record to this OTLP endpoint (gRPC host:port or unix:///path; HTTP http(s)://host:port)",
		Doc:   "the OpenTelemetry endpoint: for gRPC `host:port`, `unix:///path` or `https://host:port`; for HTTP `http(s)://host:port[/path]` (the path defaults to `/v1/logs`); turns OTLP forwarding on ([otlp.md](otlp.md))",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.otlp().Endpoint) }},
	{Key: "forward.otlp.protocol", Flag: "otlp-protocol", Arg: "PROTOCOL", OTLP: true, Default: otlpfwd.ProtocolGRPC,
		Help:  "grpc or http/protobuf",
		Doc:   "`grpc` or `http/protobuf` (the values of `OTEL_EXPORTER_OTLP_PROTOCOL`)",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.otlp().Protocol) }},
	{Key: "forward.otlp.output", Arg: "OUTPUT", OTLP: true, Default: MainOutput,
		Help:  "the output whose log the OTLP forwarder ships (a file output's name), unless forward.otlp.from names a log",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.otlp().Output) }},
	{Key: "forward.otlp.from", Arg: "PATH", OTLP: true, Default: "output.path",
		Help:  "the segment log the OTLP forwarder ships",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.otlp().From) }},
	{Key: "forward.otlp.headers", Arg: "MAP", OTLP: true,
		Help: "headers sent with every request (gRPC metadata or HTTP headers), e.g. {Authorization: Bearer …}",
		Doc:  "headers sent with every request (gRPC metadata or HTTP headers), e.g. `{Authorization: \"Bearer …\"}`; in the file only, which keeps tokens out of `ps`"},
	{Key: "forward.otlp.compression", Flag: "otlp-compression", Arg: "CODEC", OTLP: true, Default: "gzip",
		Help:  "gzip, zstd or none",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.otlp().Compression) }},
	{Key: "forward.otlp.timeout", Arg: "DUR", OTLP: true, Default: "10s",
		Help:  "bound on one export request",
		field: func(c *Config) flag.Value { return (*durationValue)(&c.otlp().Timeout) }},
	{Key: "forward.otlp.batch_records", Arg: "N", OTLP: true, Default: "4096",
		Help:  "records of one export request at most",
		field: func(c *Config) flag.Value { return (*intValue)(&c.otlp().BatchRecords) }},
	{Key: "forward.otlp.batch_bytes", Arg: "N", OTLP: true, Default: "2097152",
		Help:  "bytes of log lines one export request holds at most (receivers usually refuse requests over 4 MiB)",
		field: func(c *Config) flag.Value { return (*intValue)(&c.otlp().BatchBytes) }},
	{Key: "forward.otlp.linger", Arg: "DUR", OTLP: true, Default: "5ms",
		Help:  "how long a request waits to fill",
		field: func(c *Config) flag.Value { return (*durationValue)(&c.otlp().Linger) }},
	{Key: "forward.otlp.concurrency", Arg: "N", OTLP: true, Default: "4",
		Help:  "export requests in flight at once (each batch encoded by its own goroutine)",
		field: func(c *Config) flag.Value { return (*intValue)(&c.otlp().Concurrency) }},
	{Key: "forward.otlp.retry_max", Arg: "DUR", OTLP: true, Default: "5s",
		Help:  "longest back-off between retries of a failed request (a delay the server asks for is honoured up to a minute)",
		field: func(c *Config) flag.Value { return (*durationValue)(&c.otlp().RetryMax) }},
	{Key: "forward.otlp.checkpoint", Flag: "otlp-checkpoint", Arg: "FILE", OTLP: true, Default: "<output>.otlp.checkpoint",
		Help:  "the OTLP forwarder's checkpoint file",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.otlp().CheckpointPath) }},
	{Key: "forward.otlp.tls.enable", Flag: "otlp-tls", OTLP: true,
		Help:  "connect to the endpoint with TLS",
		Doc:   "connect to the endpoint with TLS (an `https` endpoint, any TLS file below, or skipping verification also turns TLS on; a certificate and key make it mutual TLS)",
		field: func(c *Config) flag.Value { return (*boolValue)(&c.otlp().TLS.Enable) }},
	{Key: "forward.otlp.tls.ca_file", Flag: "otlp-tls-ca", Arg: "FILE", OTLP: true,
		Help:  "CA certificate file for the endpoint",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.otlp().TLS.CAFile) }},
	{Key: "forward.otlp.tls.cert_file", Flag: "otlp-tls-cert", Arg: "FILE", OTLP: true,
		Help:  "client certificate file (mutual TLS)",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.otlp().TLS.CertFile) }},
	{Key: "forward.otlp.tls.key_file", Flag: "otlp-tls-key", Arg: "FILE", OTLP: true,
		Help:  "client key file (mutual TLS)",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.otlp().TLS.KeyFile) }},
	{Key: "forward.otlp.tls.insecure_skip_verify", Flag: "otlp-tls-insecure", OTLP: true,
		Help:  "do not verify the endpoint's certificate",
		field: func(c *Config) flag.Value { return (*boolValue)(&c.otlp().TLS.InsecureSkipVerify) }},
	{Key: "forward.otlp.tls.server_name", Arg: "NAME", OTLP: true,
		Help:  "the name the endpoint's certificate is checked against (Go's tls.Config.ServerName)",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.otlp().TLS.ServerName) }},
	{Key: "forward.otlp.checkpoint_interval", Arg: "DUR", OTLP: true, Default: "1s",
		Help:  "how often the acknowledged position is made durable: the window of possible duplicates after a crash",
		field: func(c *Config) flag.Value { return (*durationValue)(&c.otlp().CheckpointInterval) }},
	{Key: "forward.otlp.drain_timeout", Arg: "DUR", OTLP: true, Default: "drain_timeout",
		Help:  "on stop, how long requests in flight get to be acknowledged; the rest are sent again on the next start",
		field: func(c *Config) flag.Value { return (*durationValue)(&c.otlp().DrainTimeout) }},
	{Key: "forward.otlp.poll", Arg: "DUR", OTLP: true, Default: "20ms",
		Help:  "how often the log is checked for new lines",
		field: func(c *Config) flag.Value { return (*durationValue)(&c.otlp().Poll) }},
	{Key: "forward.otlp.hostname", Arg: "NAME", OTLP: true, Default: "the host's name",
		Help:  "host.name of records that do not name their host",
		Doc:   "`host.name` of records that do not name their host",
		field: func(c *Config) flag.Value { return (*stringValue)(&c.otlp().Hostname) }},
}

// KafkaPasswordEnv is the environment variable the SASL password defaults
// to, which keeps it out of ps and of the configuration file.
const KafkaPasswordEnv = "LOGAGG_KAFKA_SASL_PASSWORD"

// Lookup returns the setting with YAML key or flag name, or nil.
func Lookup(keyOrFlag string) *Setting {
	for _, s := range Settings {
		if s.Key == keyOrFlag || (s.Flag != "" && s.Flag == keyOrFlag) {
			return s
		}
	}
	return nil
}

// Flags registers settings as flags of one command and remembers the ones
// given, in order, so that Load can apply them over a configuration file:
// a flag given explicitly wins over the file, a flag not given leaves the
// file's value. The zero value is not usable; call NewFlags.
type Flags struct {
	fs    *flag.FlagSet
	base  Config // what a command starts from (its defaults)
	given []given
	file  *string
}

type given struct {
	s     *Setting
	value string
}

// Naming chooses which settings a command has and what it calls them.
type Naming func(s *Setting) (names []string)

// MainNames are the aggregator's own flags: every setting with a flag.
func MainNames(s *Setting) []string {
	if s.Flag == "" {
		return nil
	}
	return []string{s.Flag}
}

// ForwardNames are `aggregator forward`'s flags: the Kafka settings by their
// short names (the main command's names work too, hidden from its help),
// the OTLP forwarder's by the main command's names, and --config, --metrics
// and --log-level.
func ForwardNames(s *Setting) []string {
	switch {
	case s.OTLP && s.Flag != "":
		return []string{s.Flag}
	case s.Kafka && s.Short != "" && s.Flag != "":
		return []string{s.Short, s.Flag}
	case s.Kafka && s.Short != "":
		return []string{s.Short}
	case s.Flag == "config", s.Flag == "metrics", s.Flag == "log-level":
		return []string{s.Flag}
	}
	return nil
}

// NewFlags registers on fs the flags naming gives each setting, for a
// command whose configuration starts from base (usually Default()).
func NewFlags(fs *flag.FlagSet, naming Naming, base Config) *Flags {
	f := &Flags{fs: fs, base: base}
	for _, s := range Settings {
		for i, name := range naming(s) {
			if s.Flag == "config" {
				f.file = new(string)
				fs.StringVar(f.file, name, "", s.Help)
				continue
			}
			usage := s.Help
			if i > 0 {
				usage = "same as --" + naming(s)[0]
			}
			fs.Var(&recorder{f: f, s: s}, name, usage)
		}
	}
	return f
}

// File is the --config flag's value ("" when not given or not registered).
func (f *Flags) File() string {
	if f.file == nil {
		return ""
	}
	return *f.file
}

// Apply sets the flags given, in the order given, in c.
func (f *Flags) Apply(c *Config) error {
	for _, g := range f.given {
		if err := g.s.Set(c, g.value); err != nil {
			return &FieldError{Field: g.s.Key, Err: err}
		}
	}
	return nil
}

// Load is the configuration: the command's base, then the --config file
// read over it (when given), then the flags given.
func (f *Flags) Load() (Config, error) {
	c := f.base
	if p := f.File(); p != "" {
		var err error
		if c, err = LoadOver(f.base, p); err != nil {
			return c, err
		}
	}
	return c, f.Apply(&c)
}

// Given reports whether the setting with this key was given as a flag.
func (f *Flags) Given(key string) bool {
	for _, g := range f.given {
		if g.s.Key == key {
			return true
		}
	}
	return false
}

// PrintUsage writes the flags of fs in declaration order, each with its
// value name, help and default, as package flag would.
func (f *Flags) PrintUsage(w io.Writer) {
	printed := map[string]bool{}
	for _, s := range Settings {
		var fl *flag.Flag
		f.fs.VisitAll(func(x *flag.Flag) {
			if fl == nil && !printed[x.Name] && !strings.HasPrefix(x.Usage, "same as --") {
				if r, ok := x.Value.(*recorder); (ok && r.s == s) || (!ok && s.Flag == "config" && x.Name == "config") {
					fl = x
				}
			}
		})
		if fl == nil {
			continue
		}
		printed[fl.Name] = true
		line := "  --" + fl.Name
		if s.Arg != "" {
			line += " " + s.Arg
		}
		help := s.Help
		if d := s.defaultIn(f.base); d != "" && d != "0" && d != "false" && !strings.Contains(help, "default") && !strings.Contains(help, "0 =") && !strings.Contains(d, " (") {
			help += " (default " + d + ")"
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, help)
	}
	// Flags of the command that are not settings (e.g. forward's --once).
	f.fs.VisitAll(func(x *flag.Flag) {
		if _, ok := x.Value.(*recorder); ok || printed[x.Name] || x.Name == "config" {
			return
		}
		name, usage := flag.UnquoteUsage(x)
		line := "  --" + x.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, usage)
	})
}

// recorder is the flag.Value of one setting: it checks the value at once
// (so a bad flag is a usage error) and remembers it for Apply.
type recorder struct {
	f *Flags
	s *Setting
}

func (r *recorder) String() string { return "" }

func (r *recorder) Set(v string) error {
	scratch := Default()
	if err := r.s.Set(&scratch, v); err != nil {
		return err
	}
	r.f.given = append(r.f.given, given{s: r.s, value: v})
	return nil
}

func (r *recorder) IsBoolFlag() bool { return r.s.isBool() }

// The flag.Values that settings bind their fields with.
type (
	stringValue    string
	intValue       int
	int32Value     int32
	boolValue      bool
	durationValue  time.Duration
	listValue      []string // repeatable: each flag adds one
	commaListValue []string // one flag, comma-separated
)

func (v *stringValue) String() string     { return string(*v) }
func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }

func (v *intValue) String() string { return strconv.Itoa(int(*v)) }
func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("%q is not an integer", s)
	}
	*v = intValue(n)
	return nil
}

func (v *int32Value) String() string { return strconv.Itoa(int(*v)) }
func (v *int32Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return fmt.Errorf("%q is not a 32-bit integer", s)
	}
	*v = int32Value(n)
	return nil
}

func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }
func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q is not a boolean", s)
	}
	*v = boolValue(b)
	return nil
}

func (v *durationValue) String() string { return time.Duration(*v).String() }
func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (e.g. 10s, 100us)", s)
	}
	*v = durationValue(d)
	return nil
}

func (v *listValue) String() string     { return strings.Join(*v, ",") }
func (v *listValue) Set(s string) error { *v = append(*v, s); return nil }

func (v *commaListValue) String() string { return strings.Join(*v, ",") }
func (v *commaListValue) Set(s string) error {
	*v = nil
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			*v = append(*v, e)
		}
	}
	return nil
}
