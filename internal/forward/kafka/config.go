package kafka

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/ipclab/logagg/internal/segment"
	"github.com/ipclab/logagg/internal/tlsfiles"
)

// Record key choices (Config.Key).
const (
	KeyHost     = "host"     // this machine's host name: one partition per host, in order
	KeySource   = "source"   // the record's top-level "source" field
	KeyProducer = "producer" // the producer_id of the record's --seq stamp
	KeyNone     = "none"     // no key: batches spread over partitions
)

// Config is pure data: New validates it and does no network I/O; Run
// connects. Field names in errors are the YAML names.
type Config struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string `yaml:"brokers"`
	// Topic receives every record. Required.
	Topic string `yaml:"topic"`
	// Key is host (default), source, producer or none. Records without the
	// chosen field are produced without a key.
	Key string `yaml:"key"`
	// Compression is none, gzip, snappy, lz4 (default) or zstd.
	Compression string `yaml:"compression"`
	// BatchMaxBytes caps one produce batch (default 1 MiB, kgo's default).
	BatchMaxBytes int32 `yaml:"batch_max_bytes"`
	// Linger is how long a partition's batch waits to fill (default 5ms).
	Linger time.Duration `yaml:"linger"`
	// MaxInFlight bounds the records read from the log and not yet
	// acknowledged by Kafka (default 100000). When Kafka is slow or down
	// the forwarder stops reading there: the backlog stays on disk.
	MaxInFlight int `yaml:"max_in_flight"`
	// ClientID is the Kafka client id (default "logagg").
	ClientID string `yaml:"client_id"`
	TLS      TLS    `yaml:"tls"`
	SASL     SASL   `yaml:"sasl"`

	// From is the segment log to ship: the aggregator's --output path.
	// Required.
	From string `yaml:"from"`
	// Output names the aggregator's output whose log to ship when From is
	// not given (default: the main output). The aggregator resolves it.
	Output string `yaml:"output"`
	// CheckpointPath defaults to segment.CheckpointPath(From, "kafka").
	CheckpointPath string `yaml:"checkpoint"`
	// CheckpointInterval is how often the acknowledged position is made
	// durable (default 1s): the window of possible duplicates after a crash.
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	// DrainTimeout bounds the flush of in-flight records on shutdown
	// (default 10s); records not acknowledged by then are sent again on
	// the next start.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// Poll is how often the log is checked for new lines (default 20ms).
	Poll time.Duration `yaml:"poll"`
	// Hostname is the key for Key=host (default os.Hostname()).
	Hostname string `yaml:"hostname"`

	// Log receives produce errors, at most one line per 10 s (nil = none).
	Log *slog.Logger `yaml:"-"`

	// ClientOpts are appended to the kgo options the forwarder builds
	// (tests use kgo.MetadataMinAge). Not settable from YAML.
	ClientOpts []kgo.Opt `yaml:"-"`
}

// TLS configures TLS to the brokers. Any file set, or Enable, turns TLS on.
type TLS struct {
	Enable             bool   `yaml:"enable"`
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

func (t TLS) enabled() bool {
	return t.Enable || t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.InsecureSkipVerify
}

// SASL configures authentication. Mechanism is "" (none), plain,
// scram-sha-256 or scram-sha-512.
type SASL struct {
	Mechanism string `yaml:"mechanism"`
	User      string `yaml:"user"`
	Password  string `yaml:"password"`
}

// ErrConfig is wrapped by every Validate error.
var ErrConfig = errors.New("kafka forwarder config")

func badField(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
}

// withDefaults returns c with every unset field at its default.
func (c Config) withDefaults() Config {
	if c.Key == "" {
		c.Key = KeyHost
	}
	if c.Compression == "" {
		c.Compression = "lz4"
	}
	if c.BatchMaxBytes == 0 {
		c.BatchMaxBytes = 1 << 20
	}
	if c.Linger == 0 {
		c.Linger = 5 * time.Millisecond
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 100000
	}
	if c.ClientID == "" {
		c.ClientID = "logagg"
	}
	if c.CheckpointPath == "" && c.From != "" {
		c.CheckpointPath = segment.CheckpointPath(c.From, "kafka")
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = time.Second
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 10 * time.Second
	}
	if c.Poll == 0 {
		c.Poll = 20 * time.Millisecond
	}
	if c.Hostname == "" {
		c.Hostname, _ = os.Hostname()
	}
	return c
}

// Validate checks c after applying defaults and names the first bad field.
func (c Config) Validate() error {
	c = c.withDefaults()
	if len(c.Brokers) == 0 {
		return badField("brokers", "at least one broker is required")
	}
	for _, b := range c.Brokers {
		if i := strings.LastIndexByte(b, ':'); i <= 0 || i == len(b)-1 {
			return badField("brokers", "%q is not host:port", b)
		}
	}
	if c.Topic == "" {
		return badField("topic", "required")
	}
	if len(c.Topic) > 249 || strings.Trim(c.Topic, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" || c.Topic == "." || c.Topic == ".." {
		return badField("topic", "%q is not a valid Kafka topic name", c.Topic)
	}
	switch c.Key {
	case KeyHost, KeySource, KeyProducer, KeyNone:
	default:
		return badField("key", "%q: want host, source, producer or none", c.Key)
	}
	if _, err := codec(c.Compression); err != nil {
		return err
	}
	if c.BatchMaxBytes < 1024 || c.BatchMaxBytes > 1<<30 {
		return badField("batch_max_bytes", "%d: want 1 KiB to 1 GiB", c.BatchMaxBytes)
	}
	if c.Linger < 0 || c.Linger > time.Minute {
		return badField("linger", "%v: want 0 to 1m", c.Linger)
	}
	if c.MaxInFlight < 1 {
		return badField("max_in_flight", "%d: want at least 1", c.MaxInFlight)
	}
	if c.From == "" {
		return badField("from", "the log to forward is required")
	}
	if c.CheckpointInterval < 0 {
		return badField("checkpoint_interval", "%v is negative", c.CheckpointInterval)
	}
	if c.DrainTimeout < 0 {
		return badField("drain_timeout", "%v is negative", c.DrainTimeout)
	}
	if c.Poll < 0 {
		return badField("poll", "%v is negative", c.Poll)
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		return badField("tls.cert_file", "cert_file and key_file must be set together")
	}
	switch c.SASL.Mechanism {
	case "":
		if c.SASL.User != "" || c.SASL.Password != "" {
			return badField("sasl.mechanism", "user/password given without a mechanism")
		}
	case "plain", "scram-sha-256", "scram-sha-512":
		if c.SASL.User == "" {
			return badField("sasl.user", "required for %s", c.SASL.Mechanism)
		}
	default:
		return badField("sasl.mechanism", "%q: want plain, scram-sha-256 or scram-sha-512", c.SASL.Mechanism)
	}
	return nil
}

func codec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, badField("compression", "%q: want none, gzip, snappy, lz4 or zstd", name)
}

// clientOpts turns a validated, defaulted config into kgo options. It reads
// the TLS files, so errors here are I/O errors naming the file.
func (c Config) clientOpts() ([]kgo.Opt, error) {
	cc, err := codec(c.Compression)
	if err != nil {
		return nil, err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.DefaultProduceTopic(c.Topic),
		kgo.ClientID(c.ClientID),
		// kgo's defaults already are acks=all with idempotence; we state
		// them because losing acknowledged data is what this forwarder
		// exists to prevent.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(cc),
		kgo.ProducerBatchMaxBytes(c.BatchMaxBytes),
		kgo.ProducerLinger(c.Linger),
		kgo.MaxBufferedRecords(c.MaxInFlight),
		// Like librdkafka-based agents, rely on the broker's
		// auto.create.topics.enable rather than fail on a missing topic.
		kgo.AllowAutoTopicCreation(),
	}
	if c.TLS.enabled() {
		tc := &tls.Config{ServerName: c.TLS.ServerName, InsecureSkipVerify: c.TLS.InsecureSkipVerify, MinVersion: tls.VersionTLS12} //nolint:gosec // skip-verify is the operator's explicit choice
		if c.TLS.CAFile != "" {
			pool, err := tlsfiles.CertPool(c.TLS.CAFile)
			if errors.Is(err, tlsfiles.ErrNoCertificate) {
				return nil, badField("tls.ca_file", "%v", err)
			}
			if err != nil {
				return nil, fmt.Errorf("kafka: tls.ca_file: %w", err)
			}
			tc.RootCAs = pool
		}
		if c.TLS.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(c.TLS.CertFile, c.TLS.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("kafka: tls.cert_file/key_file: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	var mech sasl.Mechanism
	switch c.SASL.Mechanism {
	case "plain":
		mech = plain.Auth{User: c.SASL.User, Pass: c.SASL.Password}.AsMechanism()
	case "scram-sha-256":
		mech = scram.Auth{User: c.SASL.User, Pass: c.SASL.Password}.AsSha256Mechanism()
	case "scram-sha-512":
		mech = scram.Auth{User: c.SASL.User, Pass: c.SASL.Password}.AsSha512Mechanism()
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	return append(opts, c.ClientOpts...), nil
}
