package rtt

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/bench"
)

// FIFOPriority is the SCHED_FIFO priority both sides ask for with
// Options.Sched = SchedFIFO (ADR 0038): above every SCHED_OTHER task and the
// kernel's low real-time helpers (RCU boost runs at 1), one below the
// threaded interrupt handlers (50), so a busy-polling side never keeps its
// CPU's interrupts from being served; far below migration and watchdog (99).
const FIFOPriority = 49

// allowedCPUs lists the CPUs this thread may run on.
func allowedCPUs() ([]int, error) { return bench.AllowedCPUs() }

// threadAffinity reads back the calling thread's CPU mask.
func threadAffinity() []int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return nil
	}
	return bench.CPUList(&set)
}

// trySchedFIFO asks for SCHED_FIFO on the calling thread and reads the policy
// back. It returns "ok" or "refused: <reason>"; a refusal is not an error,
// the measurement continues under SCHED_OTHER.
func trySchedFIFO() string {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: FIFOPriority}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		return "refused: " + err.Error()
	}
	got, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return "refused: read back: " + err.Error()
	}
	if got.Policy != unix.SCHED_FIFO {
		return fmt.Sprintf("refused: policy read back as %d", got.Policy)
	}
	return "ok"
}

// threadCS returns the calling thread's voluntary and involuntary context
// switch counts (getrusage RUSAGE_THREAD).
func threadCS() (vol, invol int64) {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) != nil {
		return -1, -1
	}
	return ru.Nvcsw, ru.Nivcsw
}

// RTLimit is the kernel's real-time throttling budget: real-time tasks of
// a CPU may run RuntimeUs out of every PeriodUs; RuntimeUs < 0 means no
// limit (sched_rt_runtime_us = -1).
type RTLimit struct {
	RuntimeUs int64 `json:"sched_rt_runtime_us"`
	PeriodUs  int64 `json:"sched_rt_period_us"`
}

// readRTLimit reads the throttling budget; ok is false when /proc/sys hides it.
func readRTLimit() (l RTLimit, ok bool) {
	rt, err1 := readProcInt("/proc/sys/kernel/sched_rt_runtime_us")
	per, err2 := readProcInt("/proc/sys/kernel/sched_rt_period_us")
	return RTLimit{RuntimeUs: rt, PeriodUs: per}, err1 == nil && err2 == nil
}

func readProcInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// throttles says whether a real-time task that never sleeps is stopped for
// part of every period.
func (l RTLimit) throttles() bool { return l.RuntimeUs >= 0 && l.RuntimeUs < l.PeriodUs }

// pauseNs is how long a throttled busy-polling task waits each period.
func (l RTLimit) pauseNs() float64 { return float64(l.PeriodUs-l.RuntimeUs) * 1e3 }

// explainsMax says whether a round trip's maximum is long enough to be a
// throttling pause: the pause may start anywhere inside a round trip and
// the other side may be throttled too, so half a pause is the threshold.
func (l RTLimit) explainsMax(maxNs float64) bool {
	return l.throttles() && maxNs >= l.pauseNs()/2
}
