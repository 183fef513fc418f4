package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Placements of a row's threads on CPUs (ADR 0038), shared by rtt and
// latency: each kind says which of its threads go where.
const (
	PlaceSame     = "same"     // every thread on the first allowed CPU
	PlaceCross    = "cross"    // the message crosses from the first CPU to the second
	PlaceUnpinned = "unpinned" // the scheduler decides; where each ran is still recorded
)

// Placements are the placements, in default order.
var Placements = []string{PlaceSame, PlaceCross, PlaceUnpinned}

// PlanPlacements checks the requested placements against the CPUs allowed
// and returns them without repeats. The default is same and cross; with
// one CPU it narrows to same and says so in a note, while asking for cross
// explicitly on one CPU is an error.
func PlanPlacements(want []string, cpus []int) (names, notes []string, err error) {
	if len(cpus) == 0 {
		return nil, nil, errors.New("no CPU to run on")
	}
	if len(want) == 0 {
		want = []string{PlaceSame, PlaceCross}
		if len(cpus) < 2 {
			want = want[:1]
			notes = append(notes, fmt.Sprintf("only one CPU allowed (%d): same-core rows only, no cross-core rows", cpus[0]))
		}
	}
	for _, name := range want {
		switch {
		case slices.Contains(names, name):
			continue
		case !slices.Contains(Placements, name):
			return nil, nil, fmt.Errorf("placement %q (want %s)", name, strings.Join(Placements, ", "))
		case name == PlaceCross && len(cpus) < 2:
			return nil, nil, fmt.Errorf("placement cross needs two CPUs, allowed %v", cpus)
		}
		names = append(names, name)
	}
	return names, notes, nil
}

// AllowedCPUs lists the CPUs the calling thread may run on.
func AllowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	return CPUList(&set), nil
}

// CPUList lists the CPUs in set.
func CPUList(set *unix.CPUSet) []int {
	var out []int
	for i := 0; i < len(set)*64; i++ {
		if set.IsSet(i) {
			out = append(out, i)
		}
	}
	return out
}

// PinThread pins the calling OS thread (the caller holds
// runtime.LockOSThread) to cpu; cpu < 0 leaves it where it may run.
func PinThread(cpu int) error {
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

// GetCPU returns the CPU the calling thread runs on (-1 if unknown). A
// raw syscall, ~150 ns here: callers sample it, not call it per message.
func GetCPU() int {
	var cpu uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); e != 0 {
		return -1
	}
	return int(cpu)
}
