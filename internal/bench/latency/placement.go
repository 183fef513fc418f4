package latency

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ipclab/logagg/internal/bench"
)

// Placements of a raw row's three threads (bench's names, as in ipcbench
// rtt): same puts the sender, the echo and the receiver on the first CPU;
// cross leaves the sender alone on the first CPU and puts the echo and the
// receiver on the second; unpinned leaves them to the scheduler.
const (
	PlaceSame     = bench.PlaceSame
	PlaceCross    = bench.PlaceCross
	PlaceUnpinned = bench.PlaceUnpinned
)

// Placements are the placements, in default order.
var Placements = bench.Placements

// placement is one way of putting a row's threads on CPUs (-1: unpinned).
type placement struct {
	name                   string
	sender, echo, receiver int
}

// unpinned is the placement of aggregator rows, whose far side is the
// aggregator's own threads.
var unpinned = placement{PlaceUnpinned, -1, -1, -1}

// planPlacements turns the requested placements into CPUs
// (bench.PlanPlacements says which).
func planPlacements(want []string, cpus []int) ([]placement, []string, error) {
	names, notes, err := bench.PlanPlacements(want, cpus)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrBadOptions, err)
	}
	plan := make([]placement, 0, len(names))
	for _, name := range names {
		switch name {
		case PlaceSame:
			plan = append(plan, placement{name, cpus[0], cpus[0], cpus[0]})
		case PlaceCross:
			plan = append(plan, placement{name, cpus[0], cpus[1], cpus[1]})
		default:
			plan = append(plan, unpinned)
		}
	}
	return plan, notes, nil
}

// allowedCPUs lists the CPUs this thread may run on.
func allowedCPUs() ([]int, error) { return bench.AllowedCPUs() }

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
