package rtt

import (
	"fmt"
	"slices"
)

// placement is one way of putting a row's two sides on CPUs.
type placement struct {
	name          string // PlaceSame, PlaceCross or PlaceUnpinned
	parent, child int    // CPUs; -1 when unpinned
}

// planPlacements turns the requested placements (default same and cross)
// into CPUs. With one CPU the default narrows to "same" and says so in a
// note; asking for "cross" explicitly on one CPU is an error.
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
			plan = append(plan, placement{name, cpus[0], cpus[0]})
		case PlaceCross:
			if len(cpus) < 2 {
				return nil, nil, fmt.Errorf("%w: placement cross needs two CPUs, allowed %v", ErrBadOptions, cpus)
			}
			plan = append(plan, placement{name, cpus[0], cpus[1]})
		case PlaceUnpinned:
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
