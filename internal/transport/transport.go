// Package transport defines what a listener is and keeps the registry that
// maps URL schemes to listener packages.
//
// Every transport is one package under internal/transport/<name> that
// registers itself in init() (see internal/transport/all). A listener is
// named by a URL: unix:///tmp/log.sock, unixgram:///tmp/log.dgram.sock,
// tcp://127.0.0.1:9000, udp://127.0.0.1:9000, fifo:///tmp/log_fifo, ...
//
// # Lifecycle
//
// Open binds (so address errors surface at start-up, before anything runs).
// Run is called exactly once; it serves until ctx ends, then stops accepting
// new connections or datagrams, drains what the kernel already holds for it
// (bytes buffered on open connections, queued datagrams), submits every
// record it read, releases its fds and returns. Run returning early with an
// error means the listener failed; the aggregator then shuts down.
// Close releases the bound resources of a listener whose Run was never
// called; it is safe to call after Run returned.
package transport

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"net/url"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipclab/logagg/internal/budget"
	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/transport/evloop"
)

// Listener is one bound endpoint.
type Listener interface {
	// Run serves until ctx ends, then drains and returns (see package doc).
	Run(ctx context.Context) error
	// URL is the listener's canonical URL, used as its metrics label and as
	// "agg.listener" in every record.
	URL() string
	// Close releases resources if Run was never called.
	Close() error
}

// Options are the settings every listener shares.
type Options struct {
	MaxRecord  int         // records longer than this are truncated and flagged (bytes)
	MaxConns   int         // stream transports: at this many connections the listener stops accepting; the next wait in the backlog (0 = unlimited)
	SocketMode fs.FileMode // mode of socket files and FIFOs created
	SocketGID  int         // group of socket files, -1 = leave as is
	RcvBuf     int         // requested SO_RCVBUF / pipe size in bytes of unix and UDP sockets and FIFOs (0 = leave the kernel default)
	// TCPRcvBuf is the SO_RCVBUF of TCP connections; 0 leaves it to the
	// kernel's autotuning, which a fixed size turns off (docs/adr/0045).
	TCPRcvBuf int
	// IdleTimeout closes a stream connection that sent nothing for this long
	// (0 = never). A stalled producer then cannot hold a --max-conns slot.
	IdleTimeout time.Duration
	// DrainGrace is how long a stream connection is read after shutdown
	// starts, to collect what the peer already wrote.
	DrainGrace time.Duration
	// ReadCoalesce is the pause after a short read on unix stream
	// connections and UDP sockets, so a producer's writes collect in the
	// socket instead of each waking the aggregator (0 = read as soon as data
	// arrives). See package evloop; TCP and unix datagram sockets measured
	// better without it.
	ReadCoalesce time.Duration
	// MaxPartialBytes bounds the bytes all stream connections together
	// hold in incomplete frames (0 = DefaultMaxPartialBytes). Past it the
	// largest partial frames are written out, flagged truncated.
	MaxPartialBytes int64
	// DgramVector bounds what long datagrams make resident of one
	// datagram socket's receive vector, in bytes (0 = DefaultDgramVector):
	// short datagrams are read 64 at a time, one page of each slot
	// resident; after a datagram longer than a page, each call reads only
	// as many as fit this bound, and their pages are given back.
	DgramVector int
	// ShmRing is the size of the ring a shm:// producer gets when the
	// listen URL does not say (0 = the ring's own default).
	ShmRing int
}

// DefaultDgramVector is the default of Options.DgramVector.
const DefaultDgramVector = 8 << 20

// ConnCost is what one open stream connection or shm producer is charged
// against Deps.Conns besides its ring: its struct, pre-rendered metadata,
// map and epoll entries, and the collector's share (an idle connection
// measured 1.1-1.3 KB of RSS).
const ConnCost = 2 << 10

// DefaultMaxPartialBytes is the default of Options.MaxPartialBytes.
const DefaultMaxPartialBytes = 64 << 20

// DefaultOptions are the defaults the aggregator's flags start from.
func DefaultOptions() Options {
	return Options{
		MaxRecord:  256 << 10,
		MaxConns:   1024,
		SocketMode: 0o660,
		SocketGID:  -1,
		RcvBuf:     4 << 20,
		DrainGrace: 200 * time.Millisecond,
		// 100 µs asked is 150-300 µs slept here (timer slack): at most that
		// much added latency, for half the wake-ups at 10k records/s and
		// 1/60 of them flat out.
		ReadCoalesce: 100 * time.Microsecond,
	}
}

// Deps are what a listener needs from the aggregator.
type Deps struct {
	// Sink is where the listener's records go: each of its goroutines
	// takes an Emitter from it. Its HardStop ends when the drain must give
	// up.
	Sink *sink.Sink
	// Root is the aggregator's collectors (nil: a private set nobody
	// scrapes). Open resolves Metrics from it under the listener's URL.
	Root *metrics.Metrics
	// Metrics are the listener's own counters, set by Open; a listener
	// whose canonical URL differs from the one it was opened with (port 0,
	// an empty host) relabels them (Relabel).
	Metrics *metrics.Listener
	Log     *slog.Logger
	Opts    Options
	// Loops are the event loops every connection-oriented listener serves
	// its connections on (the daemon shares one group between all
	// listeners). Nil: the listener starts its own and stops it on return.
	Loops *evloop.Group
	// Partial is the budget of Options.MaxPartialBytes, shared by every
	// listener of a daemon. Nil: the listener makes its own.
	Partial *ByteBudget
	// FDs is the process's file descriptors, shared by every accepting
	// listener: a connection's descriptors are reserved there before
	// accept, and a reserve is kept for the rest of the daemon. Nil: no
	// reserve; the kernel's EMFILE at accept (which accepts nothing) is
	// the only bound.
	FDs *FDGate
	// Conns is the memory every listener's connections share: each open
	// stream connection holds ConnCost of it, each shm producer ConnCost
	// and its ring. At its limit listeners stop accepting until a
	// connection closes, as at MaxConns. Nil: no such bound.
	Conns *budget.Gate
	// Inherited are the sockets a service manager passed (see inherit.go);
	// a listener serves a matching one instead of binding its own. Nil:
	// none.
	Inherited *Inherited
	// FDName is the listen URL's fdname parameter, which Open removes from
	// the URL: the name of the inherited socket to serve.
	FDName string
	// StateDir is where an input that reads what others write (the
	// journal, files) keeps its durable checkpoint ("" = the working
	// directory). The file is the input's own: see CheckpointPath.
	StateDir string
}

// ByteBudget counts bytes held against a limit; safe for concurrent use.
type ByteBudget struct {
	limit int64
	held  atomic.Int64
}

// NewByteBudget returns a budget of limit bytes (<= 0: DefaultMaxPartialBytes).
func NewByteBudget(limit int64) *ByteBudget {
	if limit <= 0 {
		limit = DefaultMaxPartialBytes
	}
	return &ByteBudget{limit: limit}
}

// Add adds n (may be negative) to the bytes held and returns the new total.
func (b *ByteBudget) Add(n int64) int64 { return b.held.Add(n) }

// Held is the number of bytes held.
func (b *ByteBudget) Held() int64 { return b.held.Load() }

// Limit is the budget.
func (b *ByteBudget) Limit() int64 { return b.limit }

// Over reports whether more than the limit is held.
func (b *ByteBudget) Over() bool { return b.held.Load() > b.limit }

// TakeConn takes n bytes of d.Conns for a connection about to be
// accepted, waiting while they do not fit (counted once per wait in
// memory_limited_total{kind="connections"}); false, having taken nothing,
// once done is closed.
func (d *Deps) TakeConn(done <-chan struct{}, n int64) bool {
	if d.Conns == nil {
		return true
	}
	return d.Conns.Take(done, n, func() {
		if d.Root != nil {
			d.Root.MemoryLimited.WithLabelValues(metrics.LimitConnections).Inc()
		}
	})
}

// GiveConn gives back what TakeConn took.
func (d *Deps) GiveConn(n int64) {
	if d.Conns != nil {
		d.Conns.Give(n)
	}
}

// Memory is where the listener counts its buffers (nil counts nothing).
func (d *Deps) Memory() *metrics.Memory {
	if d.Root == nil {
		return nil
	}
	return d.Root.Memory
}

// Factory creates a bound listener for u. It must validate u and return an
// error wrapping ErrBadAddress for an address it cannot use.
type Factory func(u *url.URL, d Deps) (Listener, error)

var (
	// ErrUnknownScheme is returned by Open for a URL scheme no transport registered.
	ErrUnknownScheme = errors.New("unknown transport scheme")
	// ErrBadAddress wraps every address validation error.
	ErrBadAddress = errors.New("bad listen address")
	// ErrNotSocket is returned when a path to bind already exists and is not a
	// socket (or FIFO for fifo://): we never delete a regular file (see
	// ClaimPath).
	ErrNotSocket = errors.New("path exists and is not a socket")
)

var (
	mu       sync.Mutex
	registry = map[string]Factory{}
)

// Register makes scheme available to Open. It panics on a duplicate, which
// is a programming error caught by any test that imports the transports.
func Register(scheme string, f Factory) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[scheme]; dup {
		panic("transport: duplicate scheme " + scheme)
	}
	registry[scheme] = f
}

// A Checker says whether a listen URL's parameters are valid without
// opening anything: what check-config can report before a start would
// fail on it. maxRecord is the configured maximum record size.
type Checker func(u *url.URL, maxRecord int) error

var checkers = map[string]Checker{}

// RegisterCheck gives scheme a Checker (schemes without one are checked
// only when opened).
func RegisterCheck(scheme string, c Checker) {
	mu.Lock()
	defer mu.Unlock()
	checkers[scheme] = c
}

// Check runs the Checker of u's scheme, if it has one.
func Check(u *url.URL, maxRecord int) error {
	mu.Lock()
	c := checkers[u.Scheme]
	mu.Unlock()
	if c == nil {
		return nil
	}
	return c(u, maxRecord)
}

// Schemes lists the registered schemes, sorted.
func Schemes() []string {
	mu.Lock()
	defer mu.Unlock()
	out := make([]string, 0, len(registry))
	for s := range registry {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Open parses raw and creates the listener for its scheme, with its
// metrics resolved from d.Root under raw.
func Open(raw string, d Deps) (Listener, error) {
	raw, fdName, err := SplitFDName(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrBadAddress, raw, err)
	}
	if fdName != "" {
		d.FDName = fdName
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrBadAddress, raw, err)
	}
	mu.Lock()
	f, ok := registry[u.Scheme]
	mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w %q in %q (known: %v)", ErrUnknownScheme, u.Scheme, raw, Schemes())
	}
	if d.Sink == nil {
		return nil, errors.New("transport: Deps.Sink is nil")
	}
	if d.Root == nil {
		d.Root = metrics.New(nil)
	}
	d.Metrics = d.Root.ForListener(raw)
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	return f(u, d)
}

// Relabel makes d's metrics carry the listener's canonical URL (e.g. the
// bound port of tcp://127.0.0.1:0), as agg.listener in its records does, so
// metrics and records name a listener the same way. The series under the
// URL it was opened with are removed.
func Relabel(d *Deps, url string) {
	if d.Root == nil || d.Metrics == nil || d.Metrics.Name == url {
		return
	}
	old := d.Metrics.Name
	d.Metrics = d.Root.ForListener(url)
	d.Root.Forget(old)
}

// CheckpointPath is the checkpoint file of the input with canonical URL u
// in dir: one file per input, named after its scheme and a hash of the
// URL, so that two inputs never share one and a restart finds its own.
func CheckpointPath(dir, scheme, u string) string {
	h := fnv.New64a()
	h.Write([]byte(u))
	return filepath.Join(dir, fmt.Sprintf(".logagg-%s-%016x.checkpoint", scheme, h.Sum64()))
}

// PathOf returns the filesystem path of a unix://, unixgram:// or fifo:// URL
// (the URL's path, or its opaque part for "unix:rel/path").
func PathOf(u *url.URL) (string, error) {
	p := u.Path
	if u.Host != "" { // unix://tmp/x.sock is a common mistake for unix:///tmp/x.sock
		p = u.Host + u.Path
	}
	if p == "" {
		p = u.Opaque
	}
	if p == "" {
		return "", fmt.Errorf("%w: %s:// needs a path, e.g. %s:///tmp/log.sock", ErrBadAddress, u.Scheme, u.Scheme)
	}
	return p, nil
}
