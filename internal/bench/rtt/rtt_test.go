package rtt

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/bench"
)

// TestMain lets the test binary be its own echo side: Run re-executes
// /proc/self/exe with EchoSubcommand first.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == EchoSubcommand {
		os.Exit(EchoMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func haveGCC(t *testing.T) bool {
	if _, err := exec.LookPath("gcc"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("gcc missing in CI: the C reference rows cannot be checked")
		}
		return false
	}
	return true
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRunEveryMechanismPinnedSame(t *testing.T) {
	gcc := haveGCC(t)
	t.Setenv("IPCBENCH_CACHE", t.TempDir())
	const iters = 300
	var samples bytes.Buffer
	rep, err := Run(ctxT(t), Options{Iterations: iters, Warmup: 20, Placements: []string{PlaceSame}, CRef: gcc, Samples: &samples})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Row{}
	total := 0
	for _, r := range rep.Rows {
		byName[r.Mechanism] = r
		if r.Error != "" {
			t.Errorf("%s: %s", r.Mechanism, r.Error)
			continue
		}
		s := r.Stats
		if s.N != iters || r.Iterations != iters || len(r.Samples) != iters {
			t.Errorf("%s: n=%d iterations=%d samples=%d, want %d", r.Mechanism, s.N, r.Iterations, len(r.Samples), iters)
		}
		if !(s.Min > 0 && s.Min <= s.Median && s.Median <= s.Q99 && s.Q99 <= s.Max) {
			t.Errorf("%s: order broken: %+v", r.Mechanism, s)
		}
		total += len(r.Samples)
		// Placement same: both sides restricted to one and the same CPU,
		// and running there.
		cpu := rep.Params.CPUs[0]
		if r.Placement != PlaceSame || r.CPUs[0] != cpu || r.Sched != SchedOther {
			t.Errorf("%s: placement %s %v sched %q, want same on %d, other", r.Mechanism, r.Placement, r.CPUs, r.Sched, cpu)
		}
		if r.Impl == "go" && (!slices.Equal(r.Parent.Affinity, []int{cpu}) || r.Parent.CPUStart != cpu || r.Parent.CPUEnd != cpu) {
			t.Errorf("%s: parent affinity %v ran on %d..%d, want only %d", r.Mechanism, r.Parent.Affinity, r.Parent.CPUStart, r.Parent.CPUEnd, cpu)
		}
		if r.Child != nil && (r.Child.CPUStart != r.Parent.CPUStart || r.Child.CPUEnd != cpu) {
			t.Errorf("%s: child ran on %d..%d, parent on %d", r.Mechanism, r.Child.CPUStart, r.Child.CPUEnd, r.Parent.CPUStart)
		}
		if r.Impl == "go" && r.Child != nil && !slices.Equal(r.Child.Affinity, []int{cpu}) {
			t.Errorf("%s: child affinity %v, want [%d]", r.Mechanism, r.Child.Affinity, cpu)
		}
	}
	for _, m := range AllMechanisms {
		if _, ok := byName[m]; !ok {
			t.Errorf("no row for %s", m)
		}
	}
	if gcc {
		for _, m := range []string{"pipe", "unixsock"} {
			c, ok := byName["c:"+m]
			if !ok || c.Stats.Median <= 0 {
				t.Errorf("C reference row c:%s missing or empty: %+v", m, c.Stats)
			}
			if byName[m].RatioToC <= 0 {
				t.Errorf("%s: no Go/C ratio", m)
			}
		}
	}
	recs, err := csv.NewReader(&samples).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != total+1 || strings.Join(recs[0], ",") != "mechanism,size,iteration,ns" {
		t.Fatalf("csv: %d records (want %d + header), header %v", len(recs), total, recs[0])
	}
	for _, rec := range recs[1:] {
		mech, place, _ := strings.Cut(rec[0], "@")
		if ns, err := strconv.Atoi(rec[3]); err != nil || ns <= 0 || byName[mech].Size != 100 || place != PlaceSame {
			t.Fatalf("bad csv row %v", rec)
		}
	}
}

// By default every mechanism that has two sides on two CPUs is measured
// both same-core and cross-core, each row saying where it ran.
func TestDefaultPlacementsAreSameAndCross(t *testing.T) {
	cpus, err := allowedCPUs()
	if err != nil || len(cpus) < 2 {
		t.Skipf("needs two CPUs, have %v (%v)", cpus, err)
	}
	rep, err := Run(ctxT(t), Options{Mechanisms: []string{MechPipe, MechShmSpin, MechShm1CoreThreads}, Iterations: 200, Warmup: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rep.Rows {
		if r.Error != "" || r.Child == nil {
			t.Fatalf("%s %s: %s", r.Mechanism, r.Placement, r.Error)
		}
		got = append(got, r.Mechanism+"@"+r.Placement)
		wantChild := cpus[0]
		if r.Placement == PlaceCross {
			wantChild = cpus[1]
		}
		if !slices.Equal(r.CPUs, []int{cpus[0], wantChild}) || r.PinMode != PinThread ||
			!slices.Equal(r.Parent.Affinity, []int{cpus[0]}) || !slices.Equal(r.Child.Affinity, []int{wantChild}) || r.Child.CPUEnd != wantChild {
			t.Errorf("%s %s: cpus %v pin %s, parent %v child %v (ran on %d), want [%d] and [%d]", r.Mechanism, r.Placement,
				r.CPUs, r.PinMode, r.Parent.Affinity, r.Child.Affinity, r.Child.CPUEnd, cpus[0], wantChild)
		}
	}
	want := []string{"pipe@same", "pipe@cross", "shm-spin@same", "shm-spin@cross", "shm-1core-threads@same"}
	if !slices.Equal(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
	if !slices.Equal(rep.Params.Placements, []string{PlaceSame, PlaceCross}) {
		t.Errorf("params placements %v", rep.Params.Placements)
	}
	if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "no cross rows for shm-1core-threads") }) {
		t.Errorf("no note explains the missing cross row of shm-1core-threads: %v", rep.Notes)
	}
}

// On one CPU the default narrows to same-core, and a note says so.
func TestOneCPUMeasuresSameOnlyAndSaysSo(t *testing.T) {
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	one := []int{cpus[len(cpus)-1]}
	rep, err := Run(ctxT(t), Options{Mechanisms: []string{MechPipe}, Iterations: 50, Warmup: 5, CPUs: one})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Placement != PlaceSame || !slices.Equal(rep.Rows[0].Parent.Affinity, one) {
		t.Fatalf("rows %+v, want one same-core row on %v", rep.Rows, one)
	}
	if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "only one CPU") }) {
		t.Errorf("no note about the missing cross-core rows: %v", rep.Notes)
	}
	if _, err := Run(ctxT(t), Options{Mechanisms: []string{MechPipe}, Iterations: 10, CPUs: one, Placements: []string{PlaceCross}}); !errors.Is(err, ErrBadOptions) {
		t.Errorf("cross on one CPU: %v, want ErrBadOptions", err)
	}
}

// shm-1core-threads is two threads of one process taking turns on one CPU:
// one echo side in this process, on the same CPU, switched to once per
// hand-off. shm-serial is one thread with no hand-off at all.
func TestSingleCoreSharedMemoryRows(t *testing.T) {
	const iters = 300
	rep, err := Run(ctxT(t), Options{Mechanisms: []string{MechShm1CoreThreads, MechShmSerial}, Iterations: iters, Warmup: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 2 {
		t.Fatalf("rows %+v", rep.Rows)
	}
	threads, serial := rep.Rows[0], rep.Rows[1]
	if threads.Error != "" || serial.Error != "" {
		t.Fatalf("errors: %q %q", threads.Error, serial.Error)
	}
	cpu := rep.Params.CPUs[0]
	c := threads.Child
	if c == nil || c.PID != os.Getpid() || threads.Parent.PID != os.Getpid() || !slices.Equal(c.Affinity, []int{cpu}) || c.CPUEnd != cpu {
		t.Fatalf("threads: child %+v, want a thread of pid %d pinned to %d", c, os.Getpid(), cpu)
	}
	if sw := threads.Parent.VolCS + threads.Parent.InvolCS; sw < iters/2 {
		t.Errorf("threads: %d context switches in %d round trips; taking turns on one CPU needs about one per round trip", sw, iters)
	}
	if serial.Child != nil || !slices.Equal(serial.CPUs, []int{cpu}) {
		t.Errorf("serial: child %+v cpus %v, want one thread on %d", serial.Child, serial.CPUs, cpu)
	}
	if haveTSC && (threads.TSCPerNs <= 0 || serial.TSCPerNs <= 0) {
		t.Errorf("no TSC rate: threads %v serial %v", threads.TSCPerNs, serial.TSCPerNs)
	}
}

func TestSchedFIFOWorksOrIsRefusedClearly(t *testing.T) {
	rep, err := Run(ctxT(t), Options{Mechanisms: []string{MechPipe}, Iterations: 100, Warmup: 10, Placements: []string{PlaceSame}, Sched: SchedFIFO})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Rows[0]
	if r.Error != "" {
		t.Fatal(r.Error)
	}
	wantSched := "fifo:" + strconv.Itoa(FIFOPriority)
	if r.Parent.SchedFIFO != "ok" || r.Child.SchedFIFO != "ok" {
		wantSched = "other (fifo refused)"
	}
	if r.Sched != wantSched || rep.Params.Sched != "fifo:"+strconv.Itoa(FIFOPriority) {
		t.Errorf("row sched %q, params %q, want %q", r.Sched, rep.Params.Sched, wantSched)
	}
	for name, s := range map[string]string{"parent": r.Parent.SchedFIFO, "child": r.Child.SchedFIFO} {
		switch {
		case s == "ok":
		case strings.HasPrefix(s, "refused: "):
			found := false
			for _, n := range rep.Notes {
				found = found || strings.Contains(n, "SCHED_FIFO "+s)
			}
			if !found {
				t.Errorf("%s refused SCHED_FIFO (%s) but no note says so: %v", name, s, rep.Notes)
			}
		default:
			t.Errorf("%s sched_fifo = %q, want ok or refused: reason", name, s)
		}
	}
}

// A dead or broken echo side must give an error row promptly, never a hang.
func TestBrokenEchoSideIsAnErrorNotAHang(t *testing.T) {
	rep, err := Run(ctxT(t), Options{Mechanisms: []string{MechPipe, MechFIFO, MechMQ, MechShmFutex, MechUDP},
		Iterations: 10, Placements: []string{PlaceSame}, Exe: "/bin/true", EchoArgs: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Rows {
		if r.Error == "" || !strings.Contains(r.Error, "not ready") {
			t.Errorf("%s: error %q, want 'not ready'", r.Mechanism, r.Error)
		}
	}
	if len(rep.Notes) != len(rep.Rows) {
		t.Errorf("notes %v", rep.Notes)
	}
}

func TestOversizeIsASkippedRow(t *testing.T) {
	rep, err := Run(ctxT(t), Options{Mechanisms: []string{MechMQ}, Sizes: []int{1 << 20}, Iterations: 10})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rows[0].Error == "" || !strings.Contains(rep.Rows[0].Error, "msgsize_max") {
		t.Fatalf("mq 1MiB: %+v", rep.Rows[0])
	}
}

func TestBadOptions(t *testing.T) {
	_, err := Run(context.Background(), Options{Mechanisms: []string{"smoke-signals"}})
	if !errors.Is(err, ErrUnknownMechanism) || !errors.Is(err, ErrBadOptions) {
		t.Fatalf("unknown mechanism: %v", err)
	}
	if _, err := Run(context.Background(), Options{Placements: []string{"sideways"}}); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("bad placement: %v", err)
	}
	if _, err := Run(context.Background(), Options{Sched: "rr"}); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("bad sched: %v", err)
	}
}

// An echo side that reports ready and then exits mid-run: every raw blocking
// call on the measuring side must come back (EOF, SO_RCVTIMEO, mq deadline,
// futex timeout, abort flag) and become an error row.
func TestEchoSideDyingMidRunIsAnError(t *testing.T) {
	// The sleep makes the measuring side block in a receive before the exit.
	script := `echo '{"phase":"ready","pid":1,"cpu":0}' >&3; sleep 0.2; exit 0`
	start := time.Now()
	rep, err := Run(ctxT(t), Options{Mechanisms: []string{MechPipe, MechFIFO, MechUnixSock, MechUnixgram, MechUDP,
		MechTCP, MechMQ, MechShmSpin, MechShmFutex}, Iterations: 10, Warmup: 1, Placements: []string{PlaceSame}, Exe: "/bin/sh", EchoArgs: []string{"-c", script, "sh"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Rows {
		if r.Error == "" {
			t.Errorf("%s: no error although the echo side died", r.Mechanism)
		}
		t.Logf("%s: %s", r.Mechanism, r.Error)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestGoSyscallsMode(t *testing.T) {
	rep, err := Run(ctxT(t), Options{Mechanisms: []string{MechPipe, MechMQ, MechShmFutex}, Iterations: 100, Warmup: 5,
		Placements: []string{PlaceSame}, GoSyscalls: true})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Params.GoSyscalls {
		t.Error("params do not record go_syscalls")
	}
	for _, r := range rep.Rows {
		if r.Error != "" || r.Stats.N != 100 {
			t.Errorf("%s: n=%d %s", r.Mechanism, r.Stats.N, r.Error)
		}
	}
}

// RT throttling detection on synthetic figures: the kernel default (950 ms
// of every second) pauses a busy real-time task for 50 ms, so SCHED_FIFO
// maxima of 25 ms and more are flagged; SCHED_OTHER rows, error rows and
// an unthrottled kernel never are.
func TestRTThrottlingMarksLongFIFOMaxima(t *testing.T) {
	fifo := "fifo:" + strconv.Itoa(FIFOPriority)
	row := func(sched string, maxNs float64, errText string) Row {
		return Row{Mechanism: MechShmSpin, Size: 100, Placement: PlaceSame, Sched: sched, Stats: bench.Summary{Max: maxNs}, Error: errText}
	}
	fresh := func() []Row {
		return []Row{row(fifo, 38e6, ""), row(fifo, 24e6, ""), row(SchedOther, 45e6, ""), row("other (fifo refused)", 45e6, ""), row(fifo, 40e6, "broken")}
	}
	rows := fresh()
	notes := markRTThrottling(rows, RTLimit{RuntimeUs: 950000, PeriodUs: 1000000})
	var flagged []bool
	for _, r := range rows {
		flagged = append(flagged, r.MaxLikelyRTThrottle)
	}
	if !slices.Equal(flagged, []bool{true, false, false, false, false}) {
		t.Errorf("flagged %v, want only the 38 ms SCHED_FIFO row", flagged)
	}
	if len(notes) != 2 || !strings.Contains(notes[0], "stopped for 50ms every 1s; maxima of 25ms") || !strings.Contains(notes[1], "shm-spin 100 same (max 38.00ms)") {
		t.Errorf("notes %q", notes)
	}
	if cell := Tables(rows)[0].Table.Rows[0][10]; cell != "38.00ms"+rtThrottleMark {
		t.Errorf("max cell %q, want the RT throttling mark", cell)
	}
	for _, l := range []RTLimit{{RuntimeUs: -1, PeriodUs: 1000000}, {RuntimeUs: 1000000, PeriodUs: 1000000}} {
		rows := fresh()
		if notes := markRTThrottling(rows, l); notes != nil || rows[0].MaxLikelyRTThrottle {
			t.Errorf("%+v: no throttling, yet notes %q flagged %v", l, notes, rows[0].MaxLikelyRTThrottle)
		}
	}
}
