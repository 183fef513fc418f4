package rtt

// haveTSC: the time-stamp counter seed 001 counts its cycles in.
const haveTSC = true

// rdtsc reads the time-stamp counter (tsc_amd64.s). Unserialised on
// purpose: it brackets a whole row, thousands of round trips, so a few
// instructions of reordering do not matter.
func rdtsc() uint64
