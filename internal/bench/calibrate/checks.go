package calibrate

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/ipclab/logagg/internal/bench"
)

// Check is one machine check (see bench.MachineCheck).
type Check = bench.MachineCheck

// notExposed is the value of a check whose file the kernel does not offer.
const notExposed = "not exposed"

// MachineChecks reads the properties seed 001 relies on from the /proc and
// /sys under root ("/" on a real host; tests pass a synthetic tree). A file
// that cannot be read is a warning, never an error: the figures are still
// measured, the reader is told what could not be checked.
func MachineChecks(root string) []Check {
	flags, flagsErr := cpuFlags(root)
	flagCheck := func(flag, okWhy, warnWhy string) Check {
		c := Check{Name: flag}
		switch {
		case flagsErr != nil:
			c.Value, c.Verdict, c.Why = notExposed, bench.VerdictWarn, flagsErr.Error()
		case flags[flag]:
			c.Value, c.Verdict, c.Why = "present", bench.VerdictOK, okWhy
		default:
			c.Value, c.Verdict, c.Why = "absent", bench.VerdictWarn, warnWhy
		}
		return c
	}
	checks := []Check{
		flagCheck("constant_tsc",
			"the TSC ticks at one rate whatever the core's frequency, so cycles convert to ns with one factor (TSC rate)",
			"the TSC rate follows the core's frequency: cycle figures cannot be converted to ns with the TSC rate"),
		flagCheck("nonstop_tsc",
			"the TSC keeps ticking in deep idle states, so a timing across a sleep is right",
			"the TSC may stop in deep idle states: a timing that spans a blocking wait can come out short"),
	}
	hypervisor := flags["hypervisor"]
	if hypervisor {
		checks = append(checks, Check{Name: "hypervisor", Value: "present", Verdict: bench.VerdictWarn,
			Why: "a VM: vCPUs are host threads, so steal time, the host's SMT siblings and its frequency scaling move the figures unseen from here"})
	}
	return append(checks, governorCheck(root), smtCheck(root, hypervisor), clocksourceCheck(root))
}

// cpuFlags returns the x86 feature flags of the first CPU in /proc/cpuinfo.
func cpuFlags(root string) (map[string]bool, error) {
	f, err := os.Open(filepath.Join(root, "proc/cpuinfo"))
	if err != nil {
		return nil, fmt.Errorf("read cpuinfo: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20) // a flags line is a few KB on recent CPUs
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "flags" {
			set := map[string]bool{}
			for _, f := range strings.Fields(v) {
				set[f] = true
			}
			return set, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read cpuinfo: %w", err)
	}
	return nil, fmt.Errorf("no x86 flags line in /proc/cpuinfo")
}

var cpuDir = regexp.MustCompile(`^cpu[0-9]+$`)

// perCPU reads one file under /sys/devices/system/cpu/cpuN/ for every CPU
// that has it, keyed by CPU number.
func perCPU(root, rel string) map[int]string {
	dir := filepath.Join(root, "sys/devices/system/cpu")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := map[int]string{}
	for _, e := range ents {
		if !cpuDir.MatchString(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), rel))
		if err != nil {
			continue
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(e.Name(), "cpu"))
		out[n] = strings.TrimSpace(string(b))
	}
	return out
}

func governorCheck(root string) Check {
	c := Check{Name: "frequency governor"}
	govs := perCPU(root, "cpufreq/scaling_governor")
	if len(govs) == 0 {
		c.Value, c.Verdict = notExposed, bench.VerdictWarn
		c.Why = "no cpufreq here (in a VM the host sets the frequency): the figures may move with power management nobody here can pin"
		return c
	}
	byGov := map[string][]int{}
	for cpu, g := range govs {
		byGov[g] = append(byGov[g], cpu)
	}
	names := make([]string, 0, len(byGov))
	for g := range byGov {
		names = append(names, g)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, g := range names {
		slices.Sort(byGov[g])
		parts[i] = fmt.Sprintf("%s on CPUs %s", g, cpuList(byGov[g]))
	}
	c.Value = strings.Join(parts, "; ")
	if len(names) == 1 && names[0] == "performance" {
		c.Verdict, c.Why = bench.VerdictOK, "every CPU runs at its highest frequency: no ramp-up after an idle wait"
		return c
	}
	c.Verdict = bench.VerdictWarn
	c.Why = "a CPU not on 'performance' clocks down when idle and ramps up after a wake-up, so blocking round trips come out slower (seed 001 saw 2.2x); set it with cpufreq-set -g performance"
	return c
}

// SiblingGroups returns the sets of CPUs that share a physical core, as
// the kernel's thread_siblings_list shows them (one set per core, CPUs in
// order). Nil means the topology is not exposed.
func SiblingGroups(root string) [][]int {
	lists := perCPU(root, "topology/thread_siblings_list")
	seen := map[string]bool{}
	var groups [][]int
	for _, l := range lists {
		if seen[l] {
			continue
		}
		seen[l] = true
		cpus, err := parseCPUList(l)
		if err != nil || len(cpus) == 0 {
			continue
		}
		groups = append(groups, cpus)
	}
	slices.SortFunc(groups, func(a, b []int) int { return a[0] - b[0] })
	return groups
}

func smtCheck(root string, hypervisor bool) Check {
	c := Check{Name: "SMT siblings"}
	groups := SiblingGroups(root)
	if groups == nil {
		c.Value, c.Verdict = notExposed, bench.VerdictWarn
		c.Why = "which CPUs share a core is unknown: a cross-core row may be two threads of one core"
		return c
	}
	var shared []string
	for _, g := range groups {
		if len(g) > 1 {
			shared = append(shared, cpuList(g))
		}
	}
	if len(shared) == 0 {
		c.Value, c.Verdict = fmt.Sprintf("none: %d CPUs, each its own core", len(groups)), bench.VerdictOK
		c.Why = "a cross-core row really crosses cores"
		if hypervisor {
			c.Why += " as the guest sees it (the host may still run two vCPUs on one core's threads)"
		}
		return c
	}
	c.Value, c.Verdict = "CPUs sharing a core: "+strings.Join(shared, "; "), bench.VerdictWarn
	c.Why = "threads of one core share its execution units and L1/L2: a row pinned to two siblings is not cross-core, and a busy sibling slows the other; seed 001 takes the siblings offline"
	return c
}

func clocksourceCheck(root string) Check {
	c := Check{Name: "clocksource"}
	b, err := os.ReadFile(filepath.Join(root, "sys/devices/system/clocksource/clocksource0/current_clocksource"))
	if err != nil {
		c.Value, c.Verdict = notExposed, bench.VerdictWarn
		c.Why = "unknown whether clock reads stay in user space (vDSO) or trap into the kernel"
		return c
	}
	c.Value = strings.TrimSpace(string(b))
	switch c.Value {
	// The ones the vDSO reads without a system call.
	case "tsc", "kvm-clock", "hyperv_clocksource_tsc_page", "arch_sys_counter":
		c.Verdict, c.Why = bench.VerdictOK, "clock reads stay in user space (vDSO): a timestamp costs tens of ns"
	default:
		c.Verdict = bench.VerdictWarn
		c.Why = "the vDSO cannot read this clock: every timestamp is a system call to a device, about 1 µs, and each timed operation carries it"
	}
	return c
}

// parseCPUList parses the kernel's CPU list format ("0-3,8,10-11").
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", s, err)
			}
		}
		for i := a; i <= b; i++ {
			cpus = append(cpus, i)
		}
	}
	return cpus, nil
}

// cpuList writes CPUs as "0,4" (sets here are short, so no ranges).
func cpuList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}
