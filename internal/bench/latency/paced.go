package latency

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// sender paces total messages at one per interval from a locked thread.
// send is called with the message index and the message's scheduled send
// time, which is what the message must carry as its send stamp: a send
// that leaves late (the sender was descheduled, or a blocking write held
// it up) then shows its delay in its own latency and in that of every
// message queued behind it, each once (wrk2's method). Stamping the actual
// send time instead would hide the sender's delay, which is why the old
// method needed coordinated-omission correction on top. It stops early
// when abort is set.
type sender struct {
	total, warm int
	interval    int64
	abort       *atomic.Bool
	done        atomic.Bool
	// Results, valid after the sending goroutine finished.
	firstMeasured, last int64
	late                int
	maxLag              int64 // largest actual-minus-scheduled send time, measured messages
	err                 error
}

func (s *sender) run(send func(i int, due int64) error) {
	runtime.LockOSThread()
	setTimerSlack()
	defer releaseThread()
	defer s.done.Store(true)
	start := nanotime() + int64(time.Millisecond)
	for i := 0; i < s.total; i++ {
		if s.abort.Load() {
			s.err = errors.New("aborted")
			return
		}
		due := start + int64(i)*s.interval
		sleepUntil(due)
		now := nanotime()
		if i >= s.warm {
			if i == s.warm {
				s.firstMeasured = due
			}
			lag := now - due
			if lag > s.interval {
				s.late++
			}
			s.maxLag = max(s.maxLag, lag)
		}
		if err := send(i, due); err != nil {
			s.err = fmt.Errorf("send %d: %w", i, err)
			return
		}
		s.last = now
	}
}

// achieved is the measured send rate in messages per second.
func (s *sender) achieved() float64 {
	n := s.total - s.warm
	span := s.last - s.firstMeasured
	if n <= 1 || span <= 0 {
		return 0
	}
	return float64(n-1) / (float64(span) / 1e9)
}

// runPaced sends stamped messages over p and records the echoes.
func runPaced(o *Options, size int, p *pair, childDead *atomic.Bool) (Row, error) {
	warm, meas := o.counts()
	total := warm + meas
	var abort atomic.Bool
	snd := &sender{total: total, warm: warm, interval: o.interval(), abort: &abort}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, size)
		snd.run(func(i int, due int64) error {
			binary.LittleEndian.PutUint64(buf[0:], uint64(due))
			binary.LittleEndian.PutUint64(buf[8:], 0)
			binary.LittleEndian.PutUint64(buf[16:], uint64(i))
			return writeMsg(p.tx, buf, p.dgram)
		})
	}()

	ow, rt := newRecorder(), newRecorder()
	var (
		received  int
		lastRecv  int64
		recvErr   error
		firstSent int64 = math.MaxInt64
	)
	// Datagrams may be lost: once the sender is done, wait a second for
	// stragglers. Streams lose nothing; ten seconds of silence is a fault.
	grace := int64(10 * time.Second)
	if p.dgram {
		grace = int64(time.Second)
	}
	var doneAt atomic.Int64
	stop := func() bool {
		if childDead.Load() {
			return true
		}
		if !snd.done.Load() {
			return false
		}
		doneAt.CompareAndSwap(0, nanotime())
		return nanotime()-doneAt.Load() > grace
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		buf := make([]byte, size)
		for received < total {
			err := readMsg(p.rx, buf, p.dgram, stop)
			now := nanotime()
			if err != nil {
				if !(p.dgram && errors.Is(err, errTimeout) && !childDead.Load()) {
					recvErr = fmt.Errorf("receive after %d of %d: %w", received, total, err)
					abort.Store(true)
				}
				return
			}
			received++
			i := int(binary.LittleEndian.Uint64(buf[16:]))
			if i < warm {
				continue
			}
			t0 := int64(binary.LittleEndian.Uint64(buf[0:]))
			t1 := int64(binary.LittleEndian.Uint64(buf[8:]))
			ow.record(t1 - t0)
			rt.record(now - t0)
			firstSent = min(firstSent, t0)
			lastRecv = now
			if received%1024 == 0 {
				o.Progress.Add(1024)
			}
		}
	}()
	wg.Wait()
	if snd.err != nil && recvErr == nil {
		return Row{}, snd.err
	}
	if recvErr != nil {
		return Row{}, recvErr
	}
	row := Row{Warmup: warm, Sent: meas, Measured: ow.count(), LateSends: snd.late, MaxSendLagNs: snd.maxLag,
		AchievedRate: snd.achieved(), OneWay: ow.dist()}
	row.Lost = meas - int(row.Measured)
	rtd := rt.dist()
	row.RoundTrip = &rtd
	if row.Measured > 0 {
		row.ElapsedNs = lastRecv - firstSent
	}
	return row, nil
}
