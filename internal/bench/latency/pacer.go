package latency

import "golang.org/x/sys/unix"

// Pacing methods (Options.Pacing): how the sender waits for each
// message's scheduled send time.
const (
	// PacingSpin sleeps until a margin before the due time, then spins on
	// the clock until it, yielding its CPU at every turn. The margin
	// follows the timer's own wake-up lateness (twice the latest of the
	// last wakeWindow wake-ups), so at seed 002's 50 µs interval on a VM
	// whose wake-ups are 25–46 µs late the sender never sleeps: it spins
	// its CPU, as sockperf's does, but gives it to any thread that wakes
	// there.
	PacingSpin = "spin"
	// PacingSleep sleeps until the due time: the sender before this one.
	// Every send then leaves as late as the timer wakes the thread, and
	// that lateness is in every latency measured from the schedule; kept
	// to show it (the sender's lateness is reported either way).
	PacingSleep = "sleep"
)

// Pacings are the pacing methods, default first.
var Pacings = []string{PacingSpin, PacingSleep}

const (
	wakeWindow = 64
	// minMargin, maxMargin bound the spin margin: at least a few µs of
	// spinning covers the clock_nanosleep syscall's own cost; a margin
	// above 1 ms would mean a timer on this machine cannot be trusted at
	// all (the sender then simply spins most of the time).
	minMargin = 20_000
	maxMargin = 1_000_000
	// spinGap: two clock reads of the spin loop further apart than this
	// were not both spinning (the thread was preempted or interrupted in
	// between), so the gap is not counted as spin CPU.
	spinGap = 2_000
)

// pacer waits for scheduled send times. It is owned by the sender thread.
type pacer struct {
	sleepOnly bool
	margin    int64 // a sleep ends this long before the due time
	wakes     [wakeWindow]int64
	nWakes    int
	// spinNs estimates the CPU time spent spinning (sum of the short gaps
	// between the spin loop's clock reads); sleeps is the number of
	// clock_nanosleep wake-ups and sleptNs the time from each sleep's
	// start to its wake-up.
	spinNs, sleptNs int64
	sleeps          int
	// earlierWakeMax is the largest lateness of all wake-ups but the
	// latest: what the margin was drawn from whenever the sender chose to
	// sleep (tests check the choice against it).
	earlierWakeMax int64
}

func newPacer(method string) *pacer {
	// The first margin is a guess, replaced after the first wake-up.
	return &pacer{sleepOnly: method == PacingSleep, margin: 200_000}
}

// wait returns once CLOCK_MONOTONIC has reached due, with the time it
// read then.
func (p *pacer) wait(due int64) int64 {
	for {
		now := nanotime()
		if now >= due {
			return now
		}
		if p.sleepOnly {
			sleepUntil(due)
			p.sleeps++
			p.sleptNs += nanotime() - now
			continue
		}
		if due-now > p.margin {
			target := due - p.margin
			sleepUntil(target)
			p.sleeps++
			woke := nanotime()
			p.sleptNs += woke - now
			p.noteWake(woke - target)
			continue
		}
		last := now
		for {
			// A spinner that does not yield keeps a thread that wakes on
			// its CPU (the echo, the receiver, a tracer) waiting for the
			// scheduler's next tick, up to 4 ms here: sockperf's sender,
			// which spins without yielding, has a p99 round trip of ~4 ms
			// with everything on one CPU. Alone on its CPU a yield returns
			// at once (0.5 µs here).
			_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			t := nanotime()
			if d := t - last; d < spinGap {
				p.spinNs += d
			}
			last = t
			if t >= due {
				return t
			}
		}
	}
}

// noteWake records how late a sleep woke and sets the margin to twice the
// latest of the recent wake-ups.
func (p *pacer) noteWake(late int64) {
	if p.nWakes > 0 {
		p.earlierWakeMax = max(p.earlierWakeMax, p.wakes[(p.nWakes-1)%wakeWindow])
	}
	p.wakes[p.nWakes%wakeWindow] = late
	p.nWakes++
	var m int64
	for _, w := range p.wakes[:min(p.nWakes, wakeWindow)] {
		m = max(m, w)
	}
	p.margin = min(max(2*m, minMargin), maxMargin)
}
