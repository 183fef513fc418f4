package calibrate

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ipclab/logagg/internal/bench"
)

// want is one expected check: its verdict and a piece of its value.
type want struct{ verdict, value string }

func TestMachineChecks(t *testing.T) {
	ok, warn := bench.VerdictOK, bench.VerdictWarn
	for _, tc := range []struct {
		root string
		want map[string]want
	}{
		{"baremetal", map[string]want{
			"constant_tsc":       {ok, "present"},
			"nonstop_tsc":        {ok, "present"},
			"frequency governor": {ok, "performance on CPUs 0,1"},
			"SMT siblings":       {ok, "2 CPUs, each its own core"},
			"clocksource":        {ok, "tsc"},
		}},
		{"smt-powersave", map[string]want{
			"constant_tsc": {warn, "absent"},
			"nonstop_tsc":  {warn, "absent"},
			// policy0 (schedutil) is not a CPU and must not be counted.
			"frequency governor": {warn, "performance on CPUs 3; powersave on CPUs 0,1,2"},
			"SMT siblings":       {warn, "CPUs sharing a core: 0,2; 1,3"},
			"clocksource":        {warn, "hpet"},
		}},
		{"vm", map[string]want{
			"constant_tsc":       {ok, "present"},
			"nonstop_tsc":        {ok, "present"},
			"hypervisor":         {warn, "present"},
			"frequency governor": {warn, "not exposed"},
			"SMT siblings":       {ok, "each its own core"},
			"clocksource":        {ok, "kvm-clock"},
		}},
		{"", map[string]want{ // an empty tree: nothing is readable
			"constant_tsc":       {warn, "not exposed"},
			"nonstop_tsc":        {warn, "not exposed"},
			"frequency governor": {warn, "not exposed"},
			"SMT siblings":       {warn, "not exposed"},
			"clocksource":        {warn, "not exposed"},
		}},
	} {
		t.Run(tc.root, func(t *testing.T) {
			root := t.TempDir()
			if tc.root != "" {
				root = filepath.Join("testdata", tc.root)
			}
			got := MachineChecks(root)
			var names []string
			for _, c := range got {
				names = append(names, c.Name)
				w, ok := tc.want[c.Name]
				if !ok {
					t.Errorf("unexpected check %+v", c)
					continue
				}
				if c.Verdict != w.verdict || !strings.Contains(c.Value, w.value) || c.Why == "" {
					t.Errorf("%s = %q (%s: %s), want %s with value containing %q", c.Name, c.Value, c.Verdict, c.Why, w.verdict, w.value)
				}
			}
			for name := range tc.want {
				if !slices.Contains(names, name) {
					t.Errorf("check %s missing from %v", name, names)
				}
			}
		})
	}
}

func TestSiblingGroupsAndSameCore(t *testing.T) {
	groups := SiblingGroups(filepath.Join("testdata", "smt-powersave"))
	if want := [][]int{{0, 2}, {1, 3}}; !slices.EqualFunc(groups, want, slices.Equal) {
		t.Fatalf("groups %v, want %v", groups, want)
	}
	if !sameCore(groups, []int{2, 0}) || sameCore(groups, []int{0, 1}) {
		t.Errorf("sameCore wrong for %v", groups)
	}
	if g := SiblingGroups(t.TempDir()); g != nil {
		t.Errorf("no topology gave %v", g)
	}
}

func TestParseCPUList(t *testing.T) {
	got, err := parseCPUList("0-2,8,10-11")
	if err != nil || !slices.Equal(got, []int{0, 1, 2, 8, 10, 11}) {
		t.Fatalf("got %v, %v", got, err)
	}
	if _, err := parseCPUList("0-x"); err == nil {
		t.Error("bad list accepted")
	}
}
