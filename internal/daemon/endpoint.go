package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/transport"
)

// The metrics endpoint's own limits.
//
//   - metricsConns connections at once: the endpoint takes no descriptor
//     from the listeners' gate (it is what the gate's reserve is kept
//     for), so its share of the reserve is bounded here; a scraper beyond
//     it waits in the backlog, as a log client does at --max-conns.
//   - an idle keep-alive connection is closed after metricsIdle, so that
//     abandoned ones do not hold the slots.
const (
	metricsConns = 16
	metricsIdle  = time.Minute
)

// raiseFDLimit makes the soft RLIMIT_NOFILE as high as the hard one, once
// per process: connections beyond the soft limit would wait in the backlog
// for nothing. Go's runtime already raises it to the hard limit less one
// at start-up, and restores the original for the processes it starts (a
// captured child of "aggregator run" keeps the limit it would have had);
// setting it here would end that restoring, so this only acts when the
// runtime did not (the limit is lower than the hard one less one).
var raiseFDLimit = sync.OnceValue(func() error {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return err
	}
	if rl.Max == unix.RLIM_INFINITY || rl.Cur+1 >= rl.Max {
		return nil
	}
	rl.Cur = rl.Max
	return unix.Setrlimit(unix.RLIMIT_NOFILE, &rl)
})

// admitListener is the metrics endpoint's listener: a connection slot is
// taken before each accept (at most metricsConns), and an accept the
// kernel refuses (EMFILE) pauses it, counted like any listener's pause,
// instead of http.Server's retry loop writing to stderr.
type admitListener struct {
	net.Listener
	adm    *transport.Admission
	ctx    context.Context
	cancel context.CancelFunc
}

func newAdmitListener(ln net.Listener, url string, m *metrics.Metrics, log *slog.Logger) *admitListener {
	ctx, cancel := context.WithCancel(context.Background())
	adm := transport.NewAdmission(transport.AdmissionConfig{
		MaxConns: metricsConns, Log: log.With("listener", url),
		Paused: func(cause string) prometheus.Counter { return m.AcceptPaused.WithLabelValues(url, cause) },
		Causes: []string{metrics.PauseMaxConns, metrics.PauseFDs},
	})
	return &admitListener{Listener: ln, adm: adm, ctx: ctx, cancel: cancel}
}

// Accept implements net.Listener.
func (l *admitListener) Accept() (net.Conn, error) {
	for {
		if !l.adm.Admit(l.ctx, 0) {
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			l.adm.Refund(0, true)
			if errors.Is(err, net.ErrClosed) || !l.adm.Failed(l.ctx, err) {
				return nil, err
			}
			continue
		}
		return &admitConn{Conn: c, adm: l.adm}, nil
	}
}

// Close implements net.Listener; it ends a wait for a slot too.
func (l *admitListener) Close() error {
	l.cancel()
	return l.Listener.Close()
}

// admitConn frees its slot when closed.
type admitConn struct {
	net.Conn
	adm  *transport.Admission
	once sync.Once
}

func (c *admitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.adm.Release(0, true) })
	return err
}
