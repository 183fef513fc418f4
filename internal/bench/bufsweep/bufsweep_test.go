package bufsweep

import (
	"context"
	"errors"
	"testing"
	"time"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestQuickSweepCountsEveryWrite(t *testing.T) {
	// 1 MiB, at most 20000 writes per row: the 1-byte rows move 20000 B.
	// 100 and 4000 do not divide the volume: the last flush is partial.
	sizes := []int{1, 100, 4000, 64 << 10, 1 << 20}
	rep, err := Run(ctxT(t), Options{Quick: true, Volume: 1 << 20, Sizes: sizes})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != len(Transports)*len(sizes) {
		t.Fatalf("%d rows, want %d", len(rep.Rows), len(Transports)*len(sizes))
	}
	for _, r := range rep.Rows {
		if r.Error != "" {
			t.Errorf("%s/%d: %s", r.Transport, r.Buffer, r.Error)
			continue
		}
		wantVol := min(1<<20, r.Buffer*20000)
		if r.Volume != wantVol || r.Capped != (wantVol < 1<<20) || r.Received != int64(wantVol) {
			t.Errorf("%s/%d: volume %d capped %v received %d, want %d", r.Transport, r.Buffer, r.Volume, r.Capped, r.Received, wantVol)
		}
		want := int64((r.Volume + r.Buffer - 1) / r.Buffer)
		if r.Flushes != want {
			t.Errorf("%s/%d: %d flushes, want ceil(%d/%d) = %d", r.Transport, r.Buffer, r.Flushes, r.Volume, r.Buffer, want)
		}
		// A blocking write returns short only when a signal interrupts a
		// partly done transfer; each such case costs exactly one more call.
		if r.WriteSyscalls < r.Flushes || r.WriteSyscalls-r.Flushes < r.PartialWrites {
			t.Errorf("%s/%d: %d write calls for %d flushes and %d partial writes", r.Transport, r.Buffer, r.WriteSyscalls, r.Flushes, r.PartialWrites)
		}
		if r.PartialWrites == 0 && r.WriteSyscalls != want {
			t.Errorf("%s/%d: %d write calls, want exactly %d", r.Transport, r.Buffer, r.WriteSyscalls, want)
		}
		// The kernel's own count for the writer thread: every write(2) and
		// nothing else the writer does between the two reads (the read of
		// /proc itself is a read, not a write).
		if r.SyscwThread < r.WriteSyscalls || r.SyscwThread > r.WriteSyscalls+4 {
			t.Errorf("%s/%d: thread syscw delta %d, counted %d write calls", r.Transport, r.Buffer, r.SyscwThread, r.WriteSyscalls)
		}
		if r.SyscwProcess < r.SyscwThread {
			t.Errorf("%s/%d: process syscw %d below thread syscw %d", r.Transport, r.Buffer, r.SyscwProcess, r.SyscwThread)
		}
		if r.MBps <= 0 || r.ElapsedNs <= 0 || r.FaultVia != "" {
			t.Errorf("%s/%d: MB/s %.2f elapsed %d via %q", r.Transport, r.Buffer, r.MBps, r.ElapsedNs, r.FaultVia)
		}
		t.Logf("%-8s buf %7d vol %7d: %8.2f MB/s  write() %6d  syscw thread %6d process %6d", r.Transport, r.Buffer, r.Volume, r.MBps, r.WriteSyscalls, r.SyscwThread, r.SyscwProcess)
	}
}

func TestToxiproxyDelay(t *testing.T) {
	ok, why := NetemAvailable(ctxT(t))
	t.Logf("netem available: %v %s", ok, why)
	rep, err := Run(ctxT(t), Options{Transports: []string{"tcp", "fifo"}, Sizes: []int{64 << 10}, Volume: 256 << 10,
		Faults: []string{"none", "delay5ms"}})
	if err != nil {
		t.Fatal(err)
	}
	var plain, delayed *Row
	for i := range rep.Rows {
		r := &rep.Rows[i]
		if r.Error != "" {
			t.Fatalf("%s %s: %s", r.Transport, r.Fault, r.Error)
		}
		if r.Transport == "tcp" && r.Fault == "none" {
			plain = r
		}
		if r.Fault == "delay5ms" {
			if r.Transport != "tcp" {
				t.Errorf("fault applied to %s", r.Transport)
			}
			delayed = r
		}
	}
	if plain == nil || delayed == nil {
		t.Fatalf("missing rows: %+v", rep.Rows)
	}
	wantVia := "toxiproxy"
	if ok {
		wantVia = "netem"
	}
	if delayed.FaultVia != wantVia {
		t.Errorf("fault via %q, want %q", delayed.FaultVia, wantVia)
	}
	if delayed.ElapsedNs < int64(5*time.Millisecond) {
		t.Errorf("5 ms delay but the transfer took %v", time.Duration(delayed.ElapsedNs))
	}
	if delayed.Received != 256<<10 || delayed.Flushes != 4 {
		t.Errorf("delayed row received %d in %d flushes", delayed.Received, delayed.Flushes)
	}
	if rep.Params.Netem == "" {
		t.Error("params do not say whether netem was usable")
	}
	t.Logf("tcp 256KiB/64KiB: plain %v, delay5ms via %s %v; notes %q", time.Duration(plain.ElapsedNs), delayed.FaultVia, time.Duration(delayed.ElapsedNs), rep.Notes)
}

func TestNetemArgs(t *testing.T) {
	got := netemArgs(Profiles["delay100ms"])
	want := []string{"netem", "delay", "100000us", "10000us", "25%"}
	if len(got) != len(want) {
		t.Fatalf("%q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%q, want %q", got, want)
		}
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Transports: []string{"udp"}},
		{Sizes: []int{0}},
		{Faults: []string{"earthquake"}},
		{Volume: -1},
	} {
		if _, err := Run(context.Background(), o); !errors.Is(err, ErrBadOptions) {
			t.Errorf("%+v: err %v, want ErrBadOptions", o, err)
		}
	}
}
