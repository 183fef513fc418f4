package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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
//   - maxLinger bounds how long the endpoint outlives the drain when
//     records were lost that no scrape showed (see lingerForScrape).
const (
	metricsConns = 16
	metricsIdle  = time.Minute
	maxLinger    = 30 * time.Second
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

// scrapes remembers when /metrics was served and what it showed, so that
// the endpoint can wait for the next scrape after the final counts
// (lingerForScrape).
type scrapes struct {
	lost func() int64 // the records lost so far (Daemon.lostTotal)

	mu    sync.Mutex
	last  time.Time     // start of the latest scrape served
	gap   time.Duration // between the two latest scrapes (0: fewer than two)
	shown int64         // lost, as the latest scrape showed it
	after time.Time     // a scrape that starts after this closes done
	done  chan struct{}
}

// wrap counts the scrapes h serves.
func (s *scrapes) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		lost := s.lost() // before the gather: the scrape shows at least this
		h.ServeHTTP(w, r)
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.last.IsZero() {
			s.gap = start.Sub(s.last)
		}
		s.last, s.shown = start, lost
		if s.done != nil && start.After(s.after) {
			close(s.done)
			s.done = nil
		}
	})
}

// next returns a channel closed once a scrape that starts after t has been
// served, and how long to wait for it: 1.5 times the interval between the
// last two scrapes, at most maxLinger. It returns nil when lost records
// were all shown already, or when nobody scrapes regularly (fewer than two
// scrapes, or none for three intervals): there is nothing to wait for.
func (s *scrapes) next(t time.Time, lost int64) (<-chan struct{}, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lost <= s.shown || s.gap <= 0 || t.Sub(s.last) > 3*s.gap {
		return nil, 0
	}
	s.after = t
	s.done = make(chan struct{})
	return s.done, min(s.gap*3/2, maxLinger)
}

// lostTotal is dropped_total summed over listeners for the causes Lost
// reports (what was lost against the operator's will), read from the
// counters themselves: safe while the daemon runs, and what a scrape
// shows.
func (d *Daemon) lostTotal() int64 {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		d.Metrics.Dropped.Collect(ch)
		close(ch)
	}()
	var n float64
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) != nil {
			continue
		}
		for _, l := range pb.GetLabel() {
			if l.GetName() == "cause" && lostCauses[l.GetValue()] {
				n += pb.GetCounter().GetValue()
			}
		}
	}
	return int64(n)
}

var lostCauses = map[string]bool{metrics.CauseWriteError: true, metrics.CauseDrainTimeout: true, metrics.CauseOutputFull: true}

// lingerForScrape keeps the metrics endpoint serving after the drain when
// records were lost that no scrape has shown yet, until a scraper has
// collected the final counts.
//
// Losses at shutdown (write_error: the output still failing at the drain
// deadline; drain_timeout) are known only at the hard stop, when the
// writer gives up; the endpoint used to close right after, so no scrape
// ever showed them, only the log and the exit status. Counting them
// earlier would count as lost what a later retry may still write. So the
// endpoint stays until the next scrape that starts after the final counts
// are in, for at most 1.5 of the scraper's own intervals (maxLinger at
// most), and not at all when nobody scrapes regularly.
func (d *Daemon) lingerForScrape() {
	if d.scrapes == nil {
		return
	}
	lost := d.lostTotal()
	done, wait := d.scrapes.next(time.Now(), lost)
	if done == nil {
		return
	}
	d.log.Warn("records were lost: the metrics endpoint stays up until the next scrape collects the final counts",
		"records", lost, "at_most", wait.Round(time.Millisecond))
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
