package latency

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipclab/logagg/internal/bench"
)

// sender paces total messages at one per interval from a locked thread.
// send is called with the message index, the message's scheduled send
// time, which is what the message must carry as its send stamp, and the
// time the sender actually got to send it. A send that leaves late (the
// sender woke late, was descheduled, or a blocking write held it up) then
// shows its delay in its own latency and in that of every message queued
// behind it, each once (wrk2's method). Stamping the actual send time
// instead would hide the sender's delay, which is why the old method
// needed coordinated-omission correction on top. The sender's own
// lateness (actual minus scheduled) is recorded as a distribution of its
// own, so that a table can show when the instrument, not the transport,
// made a latency. It stops early when abort is set.
type sender struct {
	total, warm int
	interval    int64
	pacing      string // PacingSpin (default) or PacingSleep
	cpu         int    // CPU to pin the sending thread to; -1: unpinned
	abort       *atomic.Bool
	done        atomic.Bool
	// Results, valid after the sending goroutine finished.
	firstMeasured, last int64
	late                int
	maxLag              int64     // largest actual-minus-scheduled send time, measured messages
	lag                 *recorder // actual-minus-scheduled send time, measured messages
	cpus                cpuTally
	cpuNs, spinNs       int64 // the thread's CPU time over the row, and the part spent spinning
	sleeps              int
	earlierWakeMax      int64 // the pacer's largest wake-up lateness but the last
	// wallNs is the row's wall time and waitedNs the part of it the
	// thread could run but did not: wallNs less its CPU time and sleeps.
	wallNs, waitedNs int64
	err              error
}

// cpuSample: every cpuSample-th message, a side notes which CPU it is on.
const cpuSample = 16

func (s *sender) run(send func(i int, due, now int64) error) {
	defer s.done.Store(true)
	release, err := lockThread(s.cpu)
	if err != nil {
		s.err = fmt.Errorf("sender: %w", err)
		return
	}
	defer release()
	s.lag = newRecorder()
	s.cpus = cpuTally{}
	pc := newPacer(s.pacing)
	cpu0, wall0 := threadCPU(), nanotime()
	defer func() {
		s.cpuNs, s.spinNs, s.sleeps, s.earlierWakeMax = threadCPU()-cpu0, pc.spinNs, pc.sleeps, pc.earlierWakeMax
		s.wallNs = nanotime() - wall0
		s.waitedNs = max(0, s.wallNs-s.cpuNs-pc.sleptNs)
	}()
	start := nanotime() + int64(time.Millisecond)
	for i := 0; i < s.total; i++ {
		if s.abort.Load() {
			s.err = errors.New("aborted")
			return
		}
		due := start + int64(i)*s.interval
		now := pc.wait(due)
		if i >= s.warm {
			if i == s.warm {
				s.firstMeasured = due
			}
			lag := now - due
			if lag > s.interval {
				s.late++
			}
			s.maxLag = max(s.maxLag, lag)
			s.lag.record(lag)
		}
		if err := send(i, due, now); err != nil {
			s.err = fmt.Errorf("send %d: %w", i, err)
			return
		}
		if i%cpuSample == 0 {
			s.cpus.add(bench.GetCPU())
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

// fill copies the sender's results into row.
func (s *sender) fill(row *Row, pinned int) {
	row.LateSends, row.MaxSendLagNs, row.AchievedRate = s.late, s.maxLag, s.achieved()
	if s.lag != nil {
		d := s.lag.dist()
		row.SendLag = &d
	}
	row.Sender = s.cpus.side(pinned)
	row.SenderCPUNs, row.PacingCPUNs = s.cpuNs, s.spinNs
}

// runPaced sends stamped messages over p and records the echoes, with the
// sender and the receiver on the CPUs pl gives them.
func runPaced(o *Options, size int, p *pair, childDead *atomic.Bool, pl placement) (Row, error) {
	warm, meas := o.counts()
	total := warm + meas
	var abort atomic.Bool
	snd := &sender{total: total, warm: warm, interval: o.interval(), pacing: o.Pacing, cpu: pl.sender, abort: &abort}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, size)
		snd.run(func(i int, due, now int64) error {
			binary.LittleEndian.PutUint64(buf[offDue:], uint64(due))
			binary.LittleEndian.PutUint64(buf[offEcho:], 0)
			binary.LittleEndian.PutUint64(buf[offIndex:], uint64(i))
			binary.LittleEndian.PutUint64(buf[offSent:], uint64(now))
			binary.LittleEndian.PutUint32(buf[offEchoCPU:], 0)
			return writeMsg(p.tx, buf, p.dgram)
		})
	}()

	ow, rt, rtSent := newRecorder(), newRecorder(), newRecorder()
	recvCPUs, echoCPUs := cpuTally{}, cpuTally{}
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
		release, err := lockThread(pl.receiver)
		if err != nil {
			recvErr = fmt.Errorf("receiver: %w", err)
			abort.Store(true)
			return
		}
		defer release()
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
			i := int(binary.LittleEndian.Uint64(buf[offIndex:]))
			if i < warm {
				continue
			}
			t0 := int64(binary.LittleEndian.Uint64(buf[offDue:]))
			t1 := int64(binary.LittleEndian.Uint64(buf[offEcho:]))
			ts := int64(binary.LittleEndian.Uint64(buf[offSent:]))
			ow.record(t1 - t0)
			rt.record(now - t0)
			rtSent.record(now - ts)
			if c := binary.LittleEndian.Uint32(buf[offEchoCPU:]); c > 0 {
				echoCPUs.add(int(c) - 1)
			}
			firstSent = min(firstSent, t0)
			lastRecv = now
			if received%cpuSample == 0 {
				recvCPUs.add(bench.GetCPU())
			}
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
	row := Row{Warmup: warm, Sent: meas, Measured: ow.count(), OneWay: ow.dist()}
	snd.fill(&row, pl.sender)
	row.Receiver, row.Echo = recvCPUs.side(pl.receiver), echoCPUs.side(pl.echo)
	row.Lost = meas - int(row.Measured)
	rtd, rts := rt.dist(), rtSent.dist()
	row.RoundTrip, row.RoundTripFromSend = &rtd, &rts
	if row.Measured > 0 {
		row.ElapsedNs = lastRecv - firstSent
	}
	return row, nil
}
