package otlp

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/ipclab/logagg/internal/segment"
	"github.com/ipclab/logagg/internal/tlsfiles"
)

// Protocols (Config.Protocol), as OTEL_EXPORTER_OTLP_PROTOCOL names them.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Config is pure data: New validates it and does no network I/O; Run
// connects. Field names in errors are the YAML names.
type Config struct {
	// Endpoint is where records go. gRPC: host:port, or unix:///path, or
	// a URL http(s)://host:port (https turns TLS on). HTTP: a URL
	// http(s)://host:port[/path]; the path defaults to /v1/logs.
	// Required.
	Endpoint string `yaml:"endpoint"`
	// Protocol is grpc (default) or http/protobuf.
	Protocol string `yaml:"protocol"`
	// Headers are sent with every request (gRPC metadata or HTTP
	// headers): authentication tokens, tenant ids.
	Headers map[string]string `yaml:"headers"`
	// Compression is gzip (default), zstd or none.
	Compression string `yaml:"compression"`
	TLS         TLS    `yaml:"tls"`
	// Timeout bounds one export request (default 10s).
	Timeout time.Duration `yaml:"timeout"`
	// BatchRecords and BatchBytes bound one request: records, and bytes
	// of the log lines it holds (defaults 4096 and 2 MiB; receivers
	// usually refuse requests over 4 MiB).
	BatchRecords int `yaml:"batch_records"`
	BatchBytes   int `yaml:"batch_bytes"`
	// Linger is how long a batch waits to fill before it is sent
	// (default 5ms).
	Linger time.Duration `yaml:"linger"`
	// Concurrency is the number of requests in flight at once (default
	// 4); batches are encoded by as many goroutines.
	Concurrency int `yaml:"concurrency"`
	// RetryMax caps the back-off between retries of a failed request
	// (default 5s; a server's retry delay is honoured up to a minute).
	RetryMax time.Duration `yaml:"retry_max"`

	// From is the segment log to ship: the aggregator's --output path.
	// Required.
	From string `yaml:"from"`
	// Output names the aggregator's output whose log to ship when From is
	// not given (default: the main output). The aggregator resolves it.
	Output string `yaml:"output"`
	// CheckpointPath defaults to segment.CheckpointPath(From, "otlp").
	CheckpointPath string `yaml:"checkpoint"`
	// CheckpointInterval is how often the acknowledged position is made
	// durable (default 1s): the window of possible duplicates after a crash.
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	// DrainTimeout bounds the flush of in-flight requests on shutdown
	// (default 10s); records not acknowledged by then are sent again on
	// the next start.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// Poll is how often the log is checked for new lines (default 20ms).
	Poll time.Duration `yaml:"poll"`
	// Hostname is host.name of records that do not name their host
	// (default os.Hostname()).
	Hostname string `yaml:"hostname"`

	// Log receives export errors, at most one line per 10 s (nil = none).
	Log *slog.Logger `yaml:"-"`
}

// TLS configures TLS to the endpoint. Any file set, or Enable, or an
// https endpoint, turns TLS on; a certificate and key make it mutual.
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

// ErrConfig is wrapped by every Validate error.
var ErrConfig = errors.New("otlp forwarder config")

func badField(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
}

// withDefaults returns c with every unset field at its default.
func (c Config) withDefaults() Config {
	if c.Protocol == "" {
		c.Protocol = ProtocolGRPC
	}
	if c.Compression == "" {
		c.Compression = "gzip"
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.BatchRecords == 0 {
		c.BatchRecords = 4096
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = 2 << 20
	}
	if c.Linger == 0 {
		c.Linger = 5 * time.Millisecond
	}
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
	if c.RetryMax == 0 {
		c.RetryMax = 5 * time.Second
	}
	if c.CheckpointPath == "" && c.From != "" {
		c.CheckpointPath = segment.CheckpointPath(c.From, "otlp")
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
	if c.Endpoint == "" {
		return badField("endpoint", "required")
	}
	switch c.Protocol {
	case ProtocolGRPC, ProtocolHTTP:
	default:
		return badField("protocol", "%q: want %s or %s", c.Protocol, ProtocolGRPC, ProtocolHTTP)
	}
	if _, _, err := c.target(); err != nil {
		return err
	}
	switch c.Compression {
	case "none", "gzip", "zstd":
	default:
		return badField("compression", "%q: want gzip, zstd or none", c.Compression)
	}
	for k := range c.Headers {
		if k == "" || strings.ContainsAny(k, " \t\r\n:") {
			return badField("headers", "%q is not a header name", k)
		}
	}
	if c.Timeout < 0 {
		return badField("timeout", "%v is negative", c.Timeout)
	}
	if c.BatchRecords < 1 || c.BatchRecords > 1<<20 {
		return badField("batch_records", "%d: want 1 to 1048576", c.BatchRecords)
	}
	if c.BatchBytes < 1024 || c.BatchBytes > 256<<20 {
		return badField("batch_bytes", "%d: want 1 KiB to 256 MiB", c.BatchBytes)
	}
	if c.Linger < 0 || c.Linger > time.Minute {
		return badField("linger", "%v: want 0 to 1m", c.Linger)
	}
	if c.Concurrency < 1 || c.Concurrency > 256 {
		return badField("concurrency", "%d: want 1 to 256", c.Concurrency)
	}
	if c.RetryMax < 0 {
		return badField("retry_max", "%v is negative", c.RetryMax)
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
	return nil
}

// target is what to dial: a gRPC target (host:port, unix:///path) or an
// HTTP URL, and whether the endpoint asks for TLS (https).
func (c Config) target() (string, bool, error) {
	ep := c.Endpoint
	if c.Protocol == ProtocolHTTP {
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", false, badField("endpoint", "%q: want http://HOST:PORT[/PATH] or https://…", ep)
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/logs"
		}
		return u.String(), u.Scheme == "https", nil
	}
	switch {
	case strings.HasPrefix(ep, "unix://"):
		if len(ep) <= len("unix://") {
			return "", false, badField("endpoint", "%q has no path", ep)
		}
		return ep, false, nil
	case strings.HasPrefix(ep, "http://"), strings.HasPrefix(ep, "https://"):
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" {
			return "", false, badField("endpoint", "%q is not a URL", ep)
		}
		return u.Host, u.Scheme == "https", nil
	}
	if i := strings.LastIndexByte(ep, ':'); i <= 0 || i == len(ep)-1 {
		return "", false, badField("endpoint", "%q: want HOST:PORT, unix:///PATH or http(s)://HOST:PORT", ep)
	}
	return ep, false, nil
}

// tlsConfig builds the TLS configuration, or nil when TLS is off. It
// reads the files, so errors here are I/O errors naming the file.
func (c Config) tlsConfig(https bool) (*tls.Config, error) {
	if !c.TLS.enabled() && !https {
		return nil, nil
	}
	tc := &tls.Config{ServerName: c.TLS.ServerName, InsecureSkipVerify: c.TLS.InsecureSkipVerify, MinVersion: tls.VersionTLS12} //nolint:gosec // skip-verify is the operator's explicit choice
	if c.TLS.CAFile != "" {
		pool, err := tlsfiles.CertPool(c.TLS.CAFile)
		if errors.Is(err, tlsfiles.ErrNoCertificate) {
			return nil, badField("tls.ca_file", "%v", err)
		}
		if err != nil {
			return nil, fmt.Errorf("otlp forwarder: tls.ca_file: %w", err)
		}
		tc.RootCAs = pool
	}
	if c.TLS.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.TLS.CertFile, c.TLS.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("otlp forwarder: tls.cert_file/key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
