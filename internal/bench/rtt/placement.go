package rtt

import (
	"fmt"

	"github.com/ipclab/logagg/internal/bench"
)

// placement is one way of putting a row's two sides on CPUs.
type placement struct {
	name          string // PlaceSame, PlaceCross or PlaceUnpinned
	parent, child int    // CPUs; -1 when unpinned
}

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
			plan = append(plan, placement{name, cpus[0], cpus[0]})
		case PlaceCross:
			plan = append(plan, placement{name, cpus[0], cpus[1]})
		default:
			plan = append(plan, placement{name, -1, -1})
		}
	}
	return plan, notes, nil
}

// fits says whether mech can run in p: a one-thread mechanism has no
// cross-core form, and the single-core ones are defined on one CPU.
func (p placement) fits(mech string) bool {
	switch mech {
	case MechPipeInproc, MechShmSerial:
		return p.name != PlaceCross
	case MechShm1CoreProcs, MechShm1CoreThreads:
		return p.name == PlaceSame
	}
	return true
}

// cpus is Row.CPUs for a row of mech in p.
func (p placement) cpus(mech string) []int {
	switch {
	case p.name == PlaceUnpinned:
		return nil
	case mech == MechPipeInproc || mech == MechShmSerial:
		return []int{p.parent}
	}
	return []int{p.parent, p.child}
}

// pinMode is Row.PinMode for a row measured by impl ("go" or "c") in p.
func (p placement) pinMode(impl string) string {
	switch {
	case p.name == PlaceUnpinned:
		return PinNone
	case impl == "c":
		return PinProcess
	}
	return PinThread
}
