package calibrate

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"testing"
)

func TestQuickPlausible(t *testing.T) {
	gcc := true
	if _, err := exec.LookPath("gcc"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("gcc missing in CI")
		}
		gcc = false
	}
	t.Setenv("IPCBENCH_CACHE", t.TempDir())
	rep, err := Run(context.Background(), Options{Quick: true, CRef: gcc})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Params != (Params{Quick: true, CRef: gcc}) {
		t.Errorf("params %+v, want quick and c_reference %v", rep.Params, gcc)
	}
	c := rep.Calibration
	in := func(name string, v, lo, hi float64) {
		if !(v >= lo && v <= hi) {
			t.Errorf("%s = %v, want within [%v, %v]", name, v, lo, hi)
		}
	}
	// Wide bounds: a loaded 2-vCPU VM under -race is slow, but a figure
	// outside these is a broken measurement, not a slow machine.
	in("time.Now", c.TimeNowNs, 1, 20000)
	in("mono", c.MonoNs, 1, 20000)
	in("getpid", c.GetpidNs, 20, 100000)
	in("sched_yield", c.SchedYieldNs, 20, 1e6)
	if runtime.NumCPU() > 1 {
		in("cache-line round trip", c.CacheLineRTTNs, 1, 1e6)
		if len(c.CacheLineCPUs) != 2 || c.CacheLineCPUs[0] == c.CacheLineCPUs[1] {
			t.Errorf("cache-line cpus %v", c.CacheLineCPUs)
		}
	}
	if gcc && runtime.GOARCH == "amd64" {
		in("tsc per ns", c.TSCPerNs, 0.1, 10)
		in("rdtscp", c.RdtscpNs, 0.1, 10000)
		in("C clock_gettime", c.ClockGettimeCNs, 1, 20000)
	}
	if len(c.Checks) < 5 {
		t.Errorf("machine checks %+v", c.Checks)
	}
	if len(rep.Rows) < 4 {
		t.Fatalf("rows %+v", rep.Rows)
	}
	for _, r := range rep.Rows {
		spread := r.Batches < 2 || (r.FastestBatchNs <= r.MedianNs && r.MedianNs <= r.SlowestBatchNs)
		if !spread || r.MedianNs <= 0 || r.OpsPerBatch == 0 {
			t.Errorf("row %+v", r)
		}
		if (c.TSCPerNs > 0) != (r.TSCPerNs > 0) {
			t.Errorf("row %s has TSC rate %v, block %v: cycles would be missing", r.Name, r.TSCPerNs, c.TSCPerNs)
		}
	}
}
