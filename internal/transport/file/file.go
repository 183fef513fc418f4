package file

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"sync"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/transport"
)

// Scheme is the URL scheme of this transport.
const Scheme = "file"

func init() {
	transport.Register(Scheme, New)
	transport.RegisterCheck(Scheme, func(u *url.URL, maxRecord int) error {
		_, err := parseURL(u, maxRecord)
		return err
	})
}

// Listener is one file:// input: the files matching one path or glob.
type Listener struct {
	cfg           *config
	url           string
	d             transport.Deps
	ckPath        string
	restored      []ckFile
	hadCheckpoint bool
	lock          *transport.Lock

	closeOnce sync.Once
}

// New validates the URL, takes the input's checkpoint (a lock beside it,
// so two aggregators never tail into one checkpoint) and loads it. It
// opens no file: that is Run's.
func New(u *url.URL, d transport.Deps) (transport.Listener, error) {
	if d.Sink == nil {
		return nil, errors.New("file: Deps.Sink is nil")
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	cfg, err := parseURL(u, d.Opts.MaxRecord)
	if err != nil {
		return nil, err
	}
	l := &Listener{cfg: cfg, url: canonical(u), d: d}
	transport.Relabel(&l.d, l.url)
	if l.d.Metrics == nil {
		return nil, errors.New("file: Deps.Metrics is nil (open listeners with transport.Open)")
	}
	l.d.Metrics = l.d.Metrics.ForInput()
	l.ckPath = transport.CheckpointPath(d.StateDir, Scheme, l.url)
	if l.lock, err = transport.AcquireLock(l.ckPath + ".lock"); err != nil {
		return nil, fmt.Errorf("file input %s: checkpoint: %w", l.url, err)
	}
	if l.restored, l.hadCheckpoint, err = loadCheckpoint(l.ckPath); err != nil {
		l.lock.Release()
		return nil, err
	}
	return l, nil
}

// URL implements transport.Listener: the canonical URL (cleaned path,
// parameters sorted).
func (l *Listener) URL() string { return l.url }

// Close implements transport.Listener: it releases the checkpoint's lock.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { l.lock.Release() })
	return nil
}

// Run implements transport.Listener (see the package doc).
func (l *Listener) Run(ctx context.Context) error {
	defer l.Close()
	t := newTailer(l)
	// The tailer's read buffer is what the input holds whatever it reads;
	// counted with the other read buffers (docs/memory.md).
	mem := l.d.Memory()
	mem.Add(metrics.MemReadBuffers, int64(len(t.buf)))
	defer mem.Add(metrics.MemReadBuffers, -int64(len(t.buf)))
	return t.run(ctx)
}

// CheckpointPath is where the input with URL raw keeps its checkpoint
// in dir (tests and tools).
func CheckpointPath(dir, raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	return transport.CheckpointPath(dir, Scheme, canonical(u)), nil
}

func hex16(v uint64) string { return fmt.Sprintf("%016x", v) }

func parseHex(s string) (uint64, error) { return strconv.ParseUint(s, 16, 64) }
