package latency

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Placements of a raw row's three threads (ADR 0038's names, as in
// ipcbench rtt): the sender, the echo and the receiver.
const (
	PlaceSame     = "same"     // all three pinned to the first CPU
	PlaceCross    = "cross"    // the sender alone on the first CPU, the echo and the receiver on the second
	PlaceUnpinned = "unpinned" // the scheduler decides; where each ran is still recorded
)

// Placements are the placements, in default order.
var Placements = []string{PlaceSame, PlaceCross, PlaceUnpinned}

// placement is one way of putting a row's threads on CPUs (-1: unpinned).
type placement struct {
	name                   string
	sender, echo, receiver int
}

// unpinned is the placement of aggregator rows, whose far side is the
// aggregator's own threads.
var unpinned = placement{PlaceUnpinned, -1, -1, -1}

// planPlacements turns the requested placements into CPUs. With one CPU
// the default narrows to "same" and says so; asking for "cross"
// explicitly on one CPU is an error.
func planPlacements(want []string, cpus []int) ([]placement, []string, error) {
	if len(cpus) == 0 {
		return nil, nil, fmt.Errorf("%w: no CPU to run on", ErrBadOptions)
	}
	var notes []string
	if len(want) == 0 {
		want = []string{PlaceSame, PlaceCross}
		if len(cpus) < 2 {
			want = want[:1]
			notes = append(notes, fmt.Sprintf("only one CPU allowed (%d): same-core rows only, no cross-core rows", cpus[0]))
		}
	}
	var plan []placement
	for _, name := range want {
		if slices.ContainsFunc(plan, func(p placement) bool { return p.name == name }) {
			continue
		}
		switch name {
		case PlaceSame:
			plan = append(plan, placement{name, cpus[0], cpus[0], cpus[0]})
		case PlaceCross:
			if len(cpus) < 2 {
				return nil, nil, fmt.Errorf("%w: placement cross needs two CPUs, allowed %v", ErrBadOptions, cpus)
			}
			plan = append(plan, placement{name, cpus[0], cpus[1], cpus[1]})
		case PlaceUnpinned:
			plan = append(plan, unpinned)
		default:
			return nil, nil, fmt.Errorf("%w: placement %q (want %s)", ErrBadOptions, name, strings.Join(Placements, ", "))
		}
	}
	return plan, notes, nil
}

// allowedCPUs lists the CPUs this thread may run on.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var out []int
	for i := 0; i < len(set)*64; i++ {
		if set.IsSet(i) {
			out = append(out, i)
		}
	}
	return out, nil
}

// Side says where one thread of a row ran: the CPU it was pinned to (-1:
// not pinned) and, sampled every cpuSample-th message, the CPUs it was
// seen on.
type Side struct {
	Pinned int        `json:"pinned"`
	Seen   []CPUCount `json:"seen,omitempty"`
}

// CPUCount is how many of a side's samples found it on CPU.
type CPUCount struct {
	CPU     int `json:"cpu"`
	Samples int `json:"samples"`
}

// cpuTally counts samples by CPU; it belongs to one thread.
type cpuTally map[int]int

func (c cpuTally) add(cpu int) {
	if cpu >= 0 {
		c[cpu]++
	}
}

func (c cpuTally) side(pinned int) *Side {
	s := &Side{Pinned: pinned}
	for cpu, n := range c {
		s.Seen = append(s.Seen, CPUCount{cpu, n})
	}
	slices.SortFunc(s.Seen, func(a, b CPUCount) int { return a.CPU - b.CPU })
	return s
}

// String is where the side ran: "0" (all samples on CPU 0), "0 71%, 1
// 29%", or "?" without samples; a pinned side seen elsewhere (which a pin
// forbids) shows both.
func (s *Side) String() string {
	if s == nil {
		return "-"
	}
	total := 0
	for _, c := range s.Seen {
		total += c.Samples
	}
	if total == 0 {
		if s.Pinned >= 0 {
			return strconv.Itoa(s.Pinned)
		}
		return "?"
	}
	if len(s.Seen) == 1 {
		return strconv.Itoa(s.Seen[0].CPU)
	}
	parts := make([]string, len(s.Seen))
	for i, c := range s.Seen {
		parts[i] = fmt.Sprintf("%d %.0f%%", c.CPU, 100*float64(c.Samples)/float64(total))
	}
	return strings.Join(parts, ", ")
}

// Where is a row's "sender / echo / receiver" CPUs, e.g. "0 / 1 / 0".
func (r *Row) Where() string {
	echo := "aggregator"
	if r.Mode == ModeRaw {
		echo = r.Echo.String()
	}
	return r.Sender.String() + " / " + echo + " / " + r.Receiver.String()
}
