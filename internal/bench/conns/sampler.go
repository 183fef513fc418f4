package conns

import (
	"sync"
	"time"
)

// sampleEvery is how often the daemon's threads and RSS are read while a
// cell runs: one small /proc read, nothing that competes with the
// producers.
const sampleEvery = 50 * time.Millisecond

// sampler reads /proc/PID/status of the daemon in the background and keeps
// the peaks since the last take.
type sampler struct {
	pid  int
	stop chan struct{}
	done chan struct{}

	mu   sync.Mutex
	peak procStatus
	err  error // the first failed read
}

func startSampler(pid int) *sampler {
	s := &sampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	s.sample()
	go func() {
		defer close(s.done)
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *sampler) sample() procStatus {
	st, err := readStatus(s.pid)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.err == nil {
			s.err = err
		}
		return st
	}
	s.peak.Threads = max(s.peak.Threads, st.Threads)
	s.peak.RSSKiB = max(s.peak.RSSKiB, st.RSSKiB)
	s.peak.HWMKiB = max(s.peak.HWMKiB, st.HWMKiB)
	return st
}

// take samples once more and returns that sample and the peaks since the
// previous take (or the start), then starts new peaks.
func (s *sampler) take() (now, peak procStatus, err error) {
	now = s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	peak, err = s.peak, s.err
	s.peak, s.err = procStatus{}, nil
	return now, peak, err
}

// close stops the background reads; it may be called again.
func (s *sampler) close() {
	if s == nil {
		return
	}
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}
