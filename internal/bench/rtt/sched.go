package rtt

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fifoPriority is modest on purpose: high enough to win against ordinary
// tasks, low enough not to outrank kernel threads that run at 50 and above.
const fifoPriority = 10

// allowedCPUs lists the CPUs this thread may run on.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	return cpuList(&set), nil
}

func cpuList(set *unix.CPUSet) []int {
	var out []int
	for i := 0; i < len(set)*64; i++ {
		if set.IsSet(i) {
			out = append(out, i)
		}
	}
	return out
}

// pinThread pins the calling OS thread (the caller must hold
// runtime.LockOSThread) to cpu; cpu < 0 leaves it unpinned.
func pinThread(cpu int) error {
	if cpu < 0 {
		return nil
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin to cpu %d: %w", cpu, err)
	}
	return nil
}

// threadAffinity reads back the calling thread's CPU mask.
func threadAffinity() []int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return nil
	}
	return cpuList(&set)
}

// getcpu returns the CPU the calling thread is running on.
func getcpu() int {
	var cpu uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); e != 0 {
		return -1
	}
	return int(cpu)
}

// trySchedFIFO asks for SCHED_FIFO on the calling thread and reads the policy
// back. It returns "ok" or "refused: <reason>"; a refusal is not an error,
// the measurement continues under SCHED_OTHER.
func trySchedFIFO() string {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: fifoPriority}
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
