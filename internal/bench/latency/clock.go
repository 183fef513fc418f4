package latency

import (
	"runtime"
	_ "unsafe" // for go:linkname

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/bench"
)

// nanotime is the runtime's CLOCK_MONOTONIC read through the vDSO (about
// 30 ns here, against ~200 ns for the raw syscall). Its value is the same
// clock in every process on the machine, which the one-way figure relies on
// (checked in TestMonoIsClockMonotonic).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// Mono returns CLOCK_MONOTONIC in nanoseconds.
func Mono() int64 { return nanotime() }

// setTimerSlack asks for 1 ns timer slack on the calling thread so that
// clock_nanosleep wakes at the due time rather than up to 50 µs later.
func setTimerSlack() { _ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0) }

// lockThread locks the calling goroutine to its OS thread, sets 1 ns timer
// slack and pins the thread to cpu (cpu < 0: leaves it where it may run).
// The returned function undoes all three; see releaseThread for why the
// thread is given back rather than destroyed.
func lockThread(cpu int) (release func(), err error) {
	runtime.LockOSThread()
	setTimerSlack()
	var old unix.CPUSet
	pinned := false
	if cpu >= 0 {
		if err = unix.SchedGetaffinity(0, &old); err == nil {
			err = bench.PinThread(cpu)
		}
		if err != nil {
			releaseThread()
			return nil, err
		}
		pinned = true
	}
	return func() {
		if pinned {
			// The runtime reuses the thread for any goroutine: it must not
			// keep a pin meant for this row.
			_ = unix.SchedSetaffinity(0, &old)
		}
		releaseThread()
	}, nil
}

// releaseThread undoes setTimerSlack (0 restores the thread's default) and
// unlocks, so the thread goes back to the runtime instead of being
// destroyed. Destroying it would be harmless but for Pdeathsig: Linux sends
// it when the thread that forked a child exits, and any thread may have
// forked the echo or the aggregator, which would then be killed mid-run.
func releaseThread() {
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 0, 0, 0, 0)
	runtime.UnlockOSThread()
}

// threadCPU is the calling thread's CPU time in ns
// (CLOCK_THREAD_CPUTIME_ID; a real syscall, so read it once per row).
func threadCPU() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

// sleepUntil sleeps the calling thread until CLOCK_MONOTONIC reaches due,
// or a little after: a timer wake-up is late by whatever it takes the
// kernel (and, in a VM, the host) to run the thread again. Within 2 µs of
// due it spins: a sleep cannot be that short.
func sleepUntil(due int64) {
	for {
		d := due - nanotime()
		if d <= 0 {
			return
		}
		if d < 2000 {
			continue
		}
		ts := unix.NsecToTimespec(due)
		err := unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil)
		if err == nil {
			return
		}
		// EINTR (Go's preemption signal): loop and sleep again.
	}
}
