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
	rep, err := Run(ctxT(t), Options{Iterations: iters, Warmup: 20, Pin: PinSame, CRef: gcc, Samples: &samples})
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
		// pin=same: both sides restricted to one and the same CPU, and
		// running there.
		cpu := rep.Params.CPUs[0]
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
		if ns, err := strconv.Atoi(rec[3]); err != nil || ns <= 0 || byName[rec[0]].Size != 100 {
			t.Fatalf("bad csv row %v", rec)
		}
	}
}

func TestPinCrossPlacesSidesApart(t *testing.T) {
	cpus, err := allowedCPUs()
	if err != nil || len(cpus) < 2 {
		t.Skipf("needs two CPUs, have %v (%v)", cpus, err)
	}
	rep, err := Run(ctxT(t), Options{Mechanisms: []string{MechPipe, MechShmSpin}, Iterations: 200, Warmup: 10, Pin: PinCross})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Rows {
		if r.Error != "" || r.Child == nil {
			t.Fatalf("%s: %s", r.Mechanism, r.Error)
		}
		if !slices.Equal(r.Parent.Affinity, []int{cpus[0]}) || !slices.Equal(r.Child.Affinity, []int{cpus[1]}) || r.Child.CPUEnd != cpus[1] {
			t.Errorf("%s: parent %v child %v (ran on %d), want [%d] and [%d]", r.Mechanism, r.Parent.Affinity, r.Child.Affinity, r.Child.CPUEnd, cpus[0], cpus[1])
		}
	}
}

func TestSchedFIFOWorksOrIsRefusedClearly(t *testing.T) {
	rep, err := Run(ctxT(t), Options{Mechanisms: []string{MechPipe}, Iterations: 100, Warmup: 10, Pin: PinSame, SchedFIFO: true})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Rows[0]
	if r.Error != "" {
		t.Fatal(r.Error)
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
		Iterations: 10, Exe: "/bin/true", EchoArgs: []string{}})
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
	if _, err := Run(context.Background(), Options{Pin: "sideways"}); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("bad pin: %v", err)
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
		MechTCP, MechMQ, MechShmSpin, MechShmFutex}, Iterations: 10, Warmup: 1, Exe: "/bin/sh", EchoArgs: []string{"-c", script, "sh"}})
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
	rep, err := Run(ctxT(t), Options{Mechanisms: []string{MechPipe, MechMQ, MechShmFutex}, Iterations: 100, Warmup: 5, GoSyscalls: true})
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
