// Package config is the aggregator's configuration as data: a struct that a
// YAML file and command-line flags both fill, with defaults and a Validate
// that names the bad field. Nothing here opens sockets or files.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ipclab/logagg/internal/bytesize"
	"github.com/ipclab/logagg/internal/forward/kafka"
	otlpfwd "github.com/ipclab/logagg/internal/forward/otlp"
	"github.com/ipclab/logagg/internal/rules"
	"github.com/ipclab/logagg/internal/segment"
)

// Config is everything the aggregator can be told. Field names are the YAML
// keys; every flag has a key here.
type Config struct {
	Listen []string `yaml:"listen"`
	// Output is the main output, named "default": where records go when
	// there are no rules, and the write-ahead log the Kafka forwarder
	// ships unless told another.
	Output Output `yaml:"output"`
	// Outputs are more outputs, by name (docs/rules.md); each starts from
	// the main output's defaults.
	Outputs Outputs `yaml:"outputs"`
	// Rules say which records go to which outputs, which are dropped,
	// rate-limited or edited, in order (docs/rules.md).
	Rules []rules.Spec `yaml:"rules"`
	// Unrouted names the output of records no rule routes ("default"), or
	// "discard".
	Unrouted string `yaml:"unrouted"`
	Metrics  string `yaml:"metrics"` // host:port for /metrics and /healthz ("" = off; an empty host is 127.0.0.1)
	// Pprof serves /debug/pprof/ on the metrics endpoint. Off by default:
	// profiles and goroutine dumps show internals to anyone who can
	// connect, and nothing there is authenticated.
	Pprof bool `yaml:"pprof"`
	// StateDir is where inputs that read what others write (the journal,
	// files) keep their durable checkpoints ("" = the main output's
	// directory).
	StateDir string `yaml:"state_dir"`
	// Control is the path of the control socket `aggregator tap` uses
	// ("" = none); only the daemon's user and root may connect.
	Control      string        `yaml:"control"`
	Limits       Limits        `yaml:"limits"`
	Sockets      Sockets       `yaml:"sockets"`
	Queue        Queue         `yaml:"queue"`
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	LogLevel     string        `yaml:"log_level"` // debug, info, warn, error
	Forward      Forward       `yaml:"forward"`
}

// Forward configures the sinks that read the output log and ship it on.
type Forward struct {
	// Kafka, when set, forwards every written record to Kafka, at least
	// once, checkpointing what Kafka acknowledged. Its "from" defaults to
	// output.path.
	Kafka *kafka.Config `yaml:"kafka"`
	// OTLP, when set, forwards every written record to an OpenTelemetry
	// endpoint (gRPC or HTTP), at least once, checkpointing what it
	// acknowledged (docs/otlp.md). Kafka and OTLP may both run.
	OTLP *otlpfwd.Config `yaml:"otlp"`
}

// Output is a JSON-lines file (or, with type discard, nothing).
type Output struct {
	// Type is file (the default) or discard (records routed here are
	// counted and dropped).
	Type     string   `yaml:"type"`
	Path     string   `yaml:"path"`
	MaxSize  ByteSize `yaml:"max_size"`  // rotate at this size (0 = never)
	MaxFiles int      `yaml:"max_files"` // rotated segments kept (0 = all)
	Fsync    string   `yaml:"fsync"`     // never | batch | interval=DUR
	// MaxDisk caps the bytes of all segments (0 = no cap). When it is
	// reached, shipped (or, without a forwarder, the oldest) segments are
	// deleted; if none may be deleted the writer waits: stream producers
	// are held back and datagrams are dropped by the kernel (counted).
	MaxDisk ByteSize `yaml:"max_disk"`
	// DirectIO writes whole blocks with O_DIRECT instead of through the
	// page cache (see docs/adr/0015-direct-i-o-output.md).
	DirectIO bool `yaml:"direct_io"`
	// WhenFull is what happens to records for this output while its
	// queue is full (a full disk, a slow device): block holds the
	// producers back (the default of the main output), drop drops them,
	// counted, so the other outputs go on (the default of the others).
	WhenFull string `yaml:"when_full"`
}

// Outputs are named outputs. Each is read over DefaultOutput, so an
// output that says only its path rotates, fsyncs and uses direct I/O as
// the main output does by default.
type Outputs map[string]Output

// UnmarshalYAML reads each output over the defaults, refusing unknown keys
// as the rest of the file does.
func (o *Outputs) UnmarshalYAML(n *yaml.Node) error {
	var raw map[string]yaml.Node
	if err := n.Decode(&raw); err != nil {
		return err
	}
	*o = Outputs{}
	for name, node := range raw {
		b, err := yaml.Marshal(&node)
		if err != nil {
			return err
		}
		out := DefaultOutput()
		out.Path = "" // every named output says where it writes
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&out); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("outputs.%s (line %d): %w", name, node.Line, err)
		}
		(*o)[name] = out
	}
	return nil
}

// DefaultOutput is an output's settings before the configuration says
// anything (the main output's defaults).
func DefaultOutput() Output {
	return Output{Path: "aggregated_logs.jsonl", MaxSize: 128 << 20, MaxFiles: 8, Fsync: "interval=1s", DirectIO: true}
}

// Output types.
const (
	OutputFile    = "file"
	OutputDiscard = "discard"
)

// NamedOutput is one output with its name, as the daemon opens it.
type NamedOutput struct {
	Name string
	Output
	Block bool // WhenFull resolved
}

// OutputList is every output: the main one ("default") first, then the
// named ones in name order (the order their rules' bits follow).
func (c Config) OutputList() []NamedOutput {
	out := []NamedOutput{{Name: MainOutput, Output: c.Output, Block: c.Output.WhenFull != "drop"}}
	names := make([]string, 0, len(c.Outputs))
	for n := range c.Outputs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		o := c.Outputs[n]
		out = append(out, NamedOutput{Name: n, Output: o, Block: o.WhenFull == "block"})
	}
	return out
}

// MainOutput is the name of the output configured under "output".
const MainOutput = "default"

// CompileRules compiles the rules against the outputs.
func (c Config) CompileRules() (*rules.Set, error) {
	var names []string
	for _, o := range c.OutputList() {
		names = append(names, o.Name)
	}
	unrouted := c.Unrouted
	if unrouted == "" {
		unrouted = MainOutput
	}
	return rules.Compile(c.Rules, names, unrouted)
}

// Limits bound what one producer can cost us.
type Limits struct {
	// Memory is the daemon's memory budget: its resident set stays within
	// it. The queues, the partial-frame budget, the connections' share,
	// the datagram receive vectors, shm rings and the Go runtime's soft
	// limit are derived from it (docs/memory.md); a setting given
	// explicitly (max_partial, queue.batches) wins over its share.
	Memory      ByteSize      `yaml:"memory"`
	MaxRecord   ByteSize      `yaml:"max_record"`
	MaxConns    int           `yaml:"max_conns"`
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// ReadCoalesce is the pause after a short read on unix stream
	// connections and UDP sockets (0 = none); see
	// transport.Options.ReadCoalesce.
	ReadCoalesce time.Duration `yaml:"read_coalesce"`
	// MaxPartial bounds the bytes all stream connections together hold in
	// incomplete frames; past it the largest are written out, flagged
	// truncated (transport.Options.MaxPartialBytes). 0: its share of
	// Memory.
	MaxPartial ByteSize `yaml:"max_partial"`
	// EventLoops is the number of event loops serving connections
	// (0 = one per CPU the Go runtime uses).
	EventLoops int `yaml:"event_loops"`
}

// Sockets are the permissions and buffers of what we create.
type Sockets struct {
	Mode   string   `yaml:"mode"`  // octal, e.g. "0660"
	Group  string   `yaml:"group"` // name or gid ("" = leave)
	RcvBuf ByteSize `yaml:"rcvbuf"`
	// TCPRcvBuf fixes TCP connections' receive buffer; 0 (the default)
	// leaves it to the kernel's autotuning (docs/adr/0045).
	TCPRcvBuf ByteSize `yaml:"tcp_rcvbuf"`
}

// Queue sizes the pipeline between listeners and the writer.
type Queue struct {
	// Batches is the size of each file output's queue in batches of
	// BatchBytes; 0: its share of Limits.Memory.
	Batches    int      `yaml:"batches"`
	BatchBytes ByteSize `yaml:"batch_bytes"`
}

// Default is the configuration with no file and no flags.
func Default() Config {
	return Config{
		Output:       DefaultOutput(),
		Limits:       Limits{Memory: DefaultMemory, MaxRecord: 256 << 10, MaxConns: 1024, ReadCoalesce: 100 * time.Microsecond},
		Sockets:      Sockets{Mode: "0660", RcvBuf: 4 << 20},
		Queue:        Queue{BatchBytes: 64 << 10},
		DrainTimeout: 10 * time.Second,
		LogLevel:     "info",
	}
}

// DefaultMemory is the default of limits.memory: peak RSS stays within it
// in every cell of ipcbench peers and throughput (docs/memory.md).
const DefaultMemory = 32 << 20

// MinMemory is the smallest limits.memory: the runtime, the code and one
// of each buffer need about this much.
const MinMemory = 16 << 20

// Load reads a YAML file over the defaults. Unknown keys are errors, so a
// typo does not silently fall back to a default.
func Load(path string) (Config, error) { return LoadOver(Default(), path) }

// LoadOver reads a YAML file over base.
func LoadOver(base Config, path string) (Config, error) {
	c := base
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("read config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) { // io.EOF: empty file
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// FieldError names the configuration field that is wrong.
type FieldError struct {
	Field string // YAML path, e.g. "output.fsync"
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field, format string, a ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, a...)}
}

// Validate checks every field and returns all problems, each a *FieldError.
func (c Config) Validate() error {
	var errs []error
	if len(c.Listen) == 0 {
		errs = append(errs, fieldErr("listen", "no listen URL (give --listen URL, or a transport name like unixsock)"))
	}
	seen := map[string]bool{}
	for i, l := range c.Listen {
		u, err := url.Parse(l)
		switch {
		case err != nil:
			errs = append(errs, fieldErr(fmt.Sprintf("listen[%d]", i), "%q: %v", l, err))
		case u.Scheme == "":
			errs = append(errs, fieldErr(fmt.Sprintf("listen[%d]", i), "%q has no scheme (want unix://, unixgram://, tcp://, udp://, fifo://, ...)", l))
		case seen[l]:
			errs = append(errs, fieldErr(fmt.Sprintf("listen[%d]", i), "%q listed twice", l))
		}
		seen[l] = true
	}
	errs = append(errs, c.validateOutputs()...)
	if k := c.Forward.Kafka; k != nil {
		if err := c.KafkaConfig().Validate(); err != nil {
			errs = append(errs, &FieldError{Field: "forward.kafka", Err: err})
		}
		if name := k.Output; name != "" && name != MainOutput {
			if o, ok := c.Outputs[name]; !ok || o.Type == OutputDiscard {
				errs = append(errs, fieldErr("forward.kafka.output", "%q is no file output", name))
			}
		} else if c.Output.Type == OutputDiscard {
			errs = append(errs, fieldErr("forward.kafka.output", "the main output is a discard output: name a file output"))
		}
	}
	if o := c.Forward.OTLP; o != nil {
		if err := c.OTLPConfig().Validate(); err != nil {
			errs = append(errs, &FieldError{Field: "forward.otlp", Err: err})
		}
		if name := o.Output; name != "" && name != MainOutput {
			if out, ok := c.Outputs[name]; !ok || out.Type == OutputDiscard {
				errs = append(errs, fieldErr("forward.otlp.output", "%q is no file output", name))
			}
		} else if c.Output.Type == OutputDiscard {
			errs = append(errs, fieldErr("forward.otlp.output", "the main output is a discard output: name a file output"))
		}
	}
	if c.Metrics != "" {
		if _, _, err := net.SplitHostPort(c.Metrics); err != nil {
			errs = append(errs, fieldErr("metrics", "%q is not host:port: %v", c.Metrics, err))
		}
	}
	if c.Pprof && c.Metrics == "" {
		errs = append(errs, fieldErr("pprof", "is served on the metrics endpoint: set metrics (--metrics host:port) too"))
	}
	if c.Limits.MaxRecord < 64 || c.Limits.MaxRecord > 64<<20 {
		errs = append(errs, fieldErr("limits.max_record", "%d out of range [64 B, 64 MiB]", c.Limits.MaxRecord))
	}
	if c.Limits.MaxConns < 0 {
		errs = append(errs, fieldErr("limits.max_conns", "negative"))
	}
	if c.Limits.MaxPartial != 0 && c.Limits.MaxPartial < c.Limits.MaxRecord {
		errs = append(errs, fieldErr("limits.max_partial", "%d is below limits.max_record (%d): one incomplete record must fit", c.Limits.MaxPartial, c.Limits.MaxRecord))
	}
	if c.Limits.EventLoops < 0 || c.Limits.EventLoops > 256 {
		errs = append(errs, fieldErr("limits.event_loops", "%d is outside 0..256", c.Limits.EventLoops))
	}
	if c.Limits.IdleTimeout < 0 {
		errs = append(errs, fieldErr("limits.idle_timeout", "negative"))
	}
	if c.Limits.ReadCoalesce < 0 || c.Limits.ReadCoalesce > 100*time.Millisecond {
		errs = append(errs, fieldErr("limits.read_coalesce", "%s is outside 0..100ms (it delays records by up to that much)", c.Limits.ReadCoalesce))
	}
	if _, err := c.SocketMode(); err != nil {
		errs = append(errs, &FieldError{Field: "sockets.mode", Err: err})
	}
	if _, err := c.SocketGID(); err != nil {
		errs = append(errs, &FieldError{Field: "sockets.group", Err: err})
	}
	if c.Sockets.RcvBuf < 0 {
		errs = append(errs, fieldErr("sockets.rcvbuf", "negative"))
	}
	if c.Sockets.TCPRcvBuf < 0 {
		errs = append(errs, fieldErr("sockets.tcp_rcvbuf", "negative"))
	}
	if c.Queue.Batches < 0 {
		errs = append(errs, fieldErr("queue.batches", "negative (0 takes the queue's share of limits.memory)"))
	}
	if c.Limits.Memory < MinMemory {
		errs = append(errs, fieldErr("limits.memory", "%s is below %s, which the runtime, the code and one of each buffer need", c.Limits.Memory, ByteSize(MinMemory)))
	}
	if c.Queue.BatchBytes < 4096 {
		errs = append(errs, fieldErr("queue.batch_bytes", "must be at least 4 KiB"))
	}
	if c.DrainTimeout <= 0 {
		errs = append(errs, fieldErr("drain_timeout", "must be positive"))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fieldErr("log_level", "%q: want debug, info, warn or error", c.LogLevel))
	}
	return errors.Join(errs...)
}

// validateOutputs checks every output and the rules.
func (c Config) validateOutputs() []error {
	var errs []error
	paths := map[string]string{}
	for _, o := range c.OutputList() {
		f := "output."
		if o.Name != MainOutput {
			f = "outputs." + o.Name + "."
			if !validName(o.Name) || o.Name == MainOutput || o.Name == OutputDiscard {
				errs = append(errs, fieldErr("outputs."+o.Name, "%q: a name is letters, digits, - and _, and not %s or %s", o.Name, MainOutput, OutputDiscard))
			}
		}
		switch o.Type {
		case "", OutputFile:
		case OutputDiscard:
			continue
		default:
			errs = append(errs, fieldErr(f+"type", "%q: want file or discard", o.Type))
			continue
		}
		switch o.WhenFull {
		case "", "block", "drop":
		default:
			errs = append(errs, fieldErr(f+"when_full", "%q: want block or drop", o.WhenFull))
		}
		if o.Path == "" {
			errs = append(errs, fieldErr(f+"path", "empty"))
		} else if other, dup := paths[o.Path]; dup {
			errs = append(errs, fieldErr(f+"path", "%s is also the path of output %s", o.Path, other))
		}
		paths[o.Path] = o.Name
		if o.MaxSize < 0 {
			errs = append(errs, fieldErr(f+"max_size", "negative"))
		}
		if o.MaxFiles < 0 {
			errs = append(errs, fieldErr(f+"max_files", "negative"))
		}
		if o.MaxDisk < 0 {
			errs = append(errs, fieldErr(f+"max_disk", "negative"))
		} else if o.MaxDisk > 0 && (o.MaxSize == 0 || o.MaxDisk < 2*o.MaxSize) {
			errs = append(errs, fieldErr(f+"max_disk", "%s must be at least twice %smax_size (%s), which must be set", o.MaxDisk, f, o.MaxSize))
		}
		if _, err := segment.ParseFsync(o.Fsync); err != nil {
			errs = append(errs, &FieldError{Field: f + "fsync", Err: err})
		}
	}
	if c.Unrouted != "" && c.Unrouted != OutputDiscard && c.Unrouted != MainOutput {
		if _, ok := c.Outputs[c.Unrouted]; !ok {
			errs = append(errs, fieldErr("unrouted", "%q is no output (%s, an output's name, or %s)", c.Unrouted, MainOutput, OutputDiscard))
		}
	}
	if len(c.Outputs)+1 > rules.MaxOutputs {
		errs = append(errs, fieldErr("outputs", "at most %d outputs", rules.MaxOutputs-1))
	}
	if len(errs) == 0 {
		if _, err := c.CompileRules(); err != nil {
			errs = append(errs, err) // each names its rule and field
		}
	}
	return errs
}

func validName(n string) bool {
	if n == "" {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// KafkaConfig is Forward.Kafka with its defaults filled from the rest of the
// configuration (nil when forwarding is off).
func (c Config) KafkaConfig() *kafka.Config {
	if c.Forward.Kafka == nil {
		return nil
	}
	k := *c.Forward.Kafka
	if k.From == "" {
		k.From = c.Output.Path
		if o, ok := c.Outputs[k.Output]; ok {
			k.From = o.Path
		}
	}
	if k.DrainTimeout == 0 {
		k.DrainTimeout = c.DrainTimeout
	}
	if k.SASL.Password == "" && k.SASL.Mechanism != "" {
		k.SASL.Password = os.Getenv(KafkaPasswordEnv) // kept out of ps and of the file
	}
	return &k
}

// OTLPConfig is Forward.OTLP with its defaults filled from the rest of the
// configuration (nil when OTLP forwarding is off).
func (c Config) OTLPConfig() *otlpfwd.Config {
	if c.Forward.OTLP == nil {
		return nil
	}
	o := *c.Forward.OTLP
	if o.From == "" {
		o.From = c.Output.Path
		if out, ok := c.Outputs[o.Output]; ok {
			o.From = out.Path
		}
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = c.DrainTimeout
	}
	return &o
}

// StateDirectory is StateDir with its default: the main output's directory.
func (c Config) StateDirectory() string {
	if c.StateDir != "" {
		return c.StateDir
	}
	return filepath.Dir(c.Output.Path)
}

// SocketMode parses Sockets.Mode.
func (c Config) SocketMode() (fs.FileMode, error) {
	v, err := strconv.ParseUint(c.Sockets.Mode, 8, 32)
	if err != nil || v > 0o777 {
		return 0, fmt.Errorf("%q is not an octal mode like 0660", c.Sockets.Mode)
	}
	return fs.FileMode(v), nil
}

// SocketGID resolves Sockets.Group (-1 when empty).
func (c Config) SocketGID() (int, error) {
	g := c.Sockets.Group
	if g == "" {
		return -1, nil
	}
	if n, err := strconv.Atoi(g); err == nil {
		return n, nil
	}
	grp, err := user.LookupGroup(g)
	if err != nil {
		return 0, fmt.Errorf("group %q: %w", g, err)
	}
	return strconv.Atoi(grp.Gid)
}

// ByteSize is a size in bytes that reads "256KiB", "4MiB", "1GB", "512".
type ByteSize int64

// ParseByteSize parses a size with an optional unit (bytesize.Parse: K and
// KiB are 1024, KB is 1000, in any case).
func ParseByteSize(s string) (ByteSize, error) {
	v, err := bytesize.Parse(s)
	if err != nil {
		return 0, err
	}
	return ByteSize(v), nil
}

// String renders the size in the largest exact binary unit.
func (b ByteSize) String() string {
	switch {
	case b != 0 && b%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", b>>30)
	case b != 0 && b%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", b>>20)
	case b != 0 && b%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", b>>10)
	}
	return strconv.FormatInt(int64(b), 10)
}

// Set implements flag.Value.
func (b *ByteSize) Set(s string) error {
	v, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// UnmarshalYAML accepts numbers and strings with units.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	return b.Set(n.Value)
}
