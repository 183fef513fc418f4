package bufsweep

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
)

// TestMain lets the test binary be its own netns child: Run re-executes
// /proc/self/exe with NetnsChildSubcommand first.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == NetnsChildSubcommand {
		if err := NetnsChild(context.Background(), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Every row of a run moves the run's volume, whatever its buffer size:
// the 1-byte rows too (they used to be capped to a smaller volume).
func TestEveryRowMovesTheSameVolume(t *testing.T) {
	// 100 and 4000 do not divide the volume: the last flush is partial.
	const volume = 256 << 10
	sizes := []int{1, 100, 4000, 64 << 10, 1 << 20}
	rep, err := Run(ctxT(t), Options{Quick: true, Volume: volume, Sizes: sizes, Runs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != len(Transports)*len(sizes) {
		t.Fatalf("%d rows, want %d", len(rep.Rows), len(Transports)*len(sizes))
	}
	for _, r := range rep.Rows {
		if r.Error != "" || r.Runs != 2 {
			t.Errorf("%s/%d: %d runs, error %q", r.Transport, r.Buffer, r.Runs, r.Error)
			continue
		}
		if r.Volume != volume {
			t.Errorf("%s/%d: volume %d, want %d like every row", r.Transport, r.Buffer, r.Volume, volume)
		}
		want := int64((volume + r.Buffer - 1) / r.Buffer)
		if r.Flushes != want {
			t.Errorf("%s/%d: %d flushes, want ceil(%d/%d) = %d", r.Transport, r.Buffer, r.Flushes, volume, r.Buffer, want)
		}
		// A blocking write returns short only when a signal interrupts a
		// partly done transfer; each such case costs exactly one more call.
		if r.WriteSyscalls < r.Flushes || r.WriteSyscalls-r.Flushes < r.PartialWrites {
			t.Errorf("%s/%d: %d write calls for %d flushes and %d partial writes", r.Transport, r.Buffer, r.WriteSyscalls, r.Flushes, r.PartialWrites)
		}
		// The kernel's own count for the writer thread: every write(2) and
		// nothing else the writer does between the two reads.
		if r.SyscwThread < r.WriteSyscalls || r.SyscwThread > r.WriteSyscalls+4 {
			t.Errorf("%s/%d: thread syscw delta %d, counted %d write calls", r.Transport, r.Buffer, r.SyscwThread, r.WriteSyscalls)
		}
		if !(0 < r.MBpsMin && r.MBpsMin <= r.MBps && r.MBps <= r.MBpsMax) || r.ElapsedNs <= 0 {
			t.Errorf("%s/%d: MB/s %.2f not within min..max %.2f..%.2f, elapsed %d", r.Transport, r.Buffer, r.MBps, r.MBpsMin, r.MBpsMax, r.ElapsedNs)
		}
		if r.Engine != EngineNone || r.Dropped != 0 || r.TCPPackets != 0 {
			t.Errorf("%s/%d: unfaulted row has engine %q, %d/%d dropped", r.Transport, r.Buffer, r.Engine, r.Dropped, r.TCPPackets)
		}
	}
}

func TestSummarizeMedianAndSpread(t *testing.T) {
	r := Row{Volume: 1e6}
	summarize(&r, []sample{{ElapsedNs: 2e6, Flushes: 2}, {ElapsedNs: 1e6, Flushes: 1}, {Err: "boom"}, {ElapsedNs: 4e6, Flushes: 4}})
	if r.Runs != 3 || r.Error != "boom" {
		t.Fatalf("runs %d error %q, want 3 and the failed run's error", r.Runs, r.Error)
	}
	if r.MBps != 500 || r.MBpsMin != 250 || r.MBpsMax != 1000 || r.Flushes != 2 || r.ElapsedNs != 2e6 {
		t.Errorf("median %.0f (run with %d flushes, %d ns), spread %.0f..%.0f; want 500 from the 2 ms run, 250..1000",
			r.MBps, r.Flushes, r.ElapsedNs, r.MBpsMin, r.MBpsMax)
	}
}

// hostHasOurTable reports whether the test's own network namespace has
// an nftables table of bufsweep's name.
func hostHasOurTable(t *testing.T) bool {
	out, err := exec.Command("nft", "list", "tables").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list tables: %v: %s", err, out)
	}
	return strings.Contains(string(out), "inet "+nftTable+"\n")
}

// The loss rows lose packets for real, in a namespace of their own: 5 %
// loss shows drops and retransmissions, the 0 % control in the same
// namespace neither, and the host's ruleset never sees the table.
func TestLossIsRealAndPrivate(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "nft")
	if hostHasOurTable(t) {
		t.Fatalf("the host already has table inet %s before the test", nftTable)
	}
	// 16 MiB in 4 KiB writes. A busy sender's writes leave lo as segments
	// of up to 64 KiB, so that is at least 256 packets, and 5 % loss drops
	// some with certainty (P(no drop in 256 packets) = 0.95^256 < 2e-6).
	rep, err := Run(ctxT(t), Options{Transports: []string{"tcp"}, Sizes: []int{4 << 10}, Volume: 16 << 20, Runs: 1,
		Faults: []string{"loss0", "loss5"}})
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]Row{}
	for _, r := range rep.Rows {
		if r.Error != "" || r.Runs != 1 {
			t.Fatalf("%s: %d runs, error %q; notes %q", r.Fault, r.Runs, r.Error, rep.Notes)
		}
		if r.Engine != EngineNftNetns || !strings.Contains(r.FaultDetail, "namespace") {
			t.Errorf("%s: engine %q (%s), want %q", r.Fault, r.Engine, r.FaultDetail, EngineNftNetns)
		}
		rows[r.Fault] = r
		t.Logf("%s: %d tcp packets, %d dropped, %d retransmitted, %d received twice, %.1f MB/s",
			r.Fault, r.TCPPackets, r.Dropped, r.Retransmits, r.Duplicates, r.MBps)
	}
	ctl, lossy := rows["loss0"], rows["loss5"]
	if ctl.TCPPackets < 50 || lossy.TCPPackets < 50 {
		t.Fatalf("counters saw %d and %d tcp packets: the rule did not count the transfer", ctl.TCPPackets, lossy.TCPPackets)
	}
	if lossy.Dropped == 0 || lossy.Retransmits == 0 {
		t.Errorf("5 %% loss: %d of %d packets dropped, %d retransmits; want both > 0", lossy.Dropped, lossy.TCPPackets, lossy.Retransmits)
	}
	// Each packet is dropped with probability 0.05 on its own, so the count
	// is binomial: fail only on a count that 5 % loss makes less likely
	// than one in a million, whichever tail it is in.
	if below, above := binomialTails(lossy.TCPPackets, lossy.Dropped, 0.05); below < 1e-6 || above < 1e-6 {
		t.Errorf("5 %% loss dropped %d of %d packets (P(no more) = %.1e, P(no fewer) = %.1e)",
			lossy.Dropped, lossy.TCPPackets, below, above)
	}
	// Nothing drops on the control. A busy machine can still make TCP send
	// a segment again that was not lost: an acknowledgement late past the
	// loss probe's timer, or segments reordered on lo when the sender moves
	// between CPUs (seen: 13 fast retransmissions beside four busy loops).
	// Then the receiver gets it twice and says so, so more than one
	// retransmission must come with segments received twice.
	if ctl.Dropped != 0 {
		t.Errorf("0 %% loss: %d packets dropped; want none", ctl.Dropped)
	}
	if ctl.Retransmits > 1 && ctl.Duplicates == 0 {
		t.Errorf("0 %% loss: %d retransmits, and no segment received twice", ctl.Retransmits)
	}
	if hostHasOurTable(t) {
		t.Errorf("table inet %s left in the host's namespace", nftTable)
	}
}

// binomialTails returns P(X <= k) and P(X >= k) for X ~ Binomial(n, p).
func binomialTails(n, k int64, p float64) (below, above float64) {
	lgN, _ := math.Lgamma(float64(n + 1))
	for i := int64(0); i <= n; i++ {
		lgI, _ := math.Lgamma(float64(i + 1))
		lgRest, _ := math.Lgamma(float64(n - i + 1))
		pi := math.Exp(lgN - lgI - lgRest + float64(i)*math.Log(p) + float64(n-i)*math.Log1p(-p))
		if i <= k {
			below += pi
		}
		if i >= k {
			above += pi
		}
	}
	return below, above
}

func TestBinomialTails(t *testing.T) {
	below, above := binomialTails(139, 1, 0.05) // a count seen under load with 4 MiB
	if math.Abs(below-0.00666) > 1e-5 || math.Abs(above-0.99920) > 1e-5 {
		t.Errorf("Binomial(139, 0.05) tails at 1: %.5f, %.5f; want 0.00666, 0.99920", below, above)
	}
	if below, _ := binomialTails(256, 0, 0.05); below > 2e-6 {
		t.Errorf("P(no drop in 256 packets) = %.2e, want < 2e-6", below)
	}
}

// The child must refuse to touch nftables in its parent's namespace.
func TestNetnsChildRefusesTheHostNamespace(t *testing.T) {
	cmd := exec.Command("/proc/self/exe", NetnsChildSubcommand)
	cmd.Stdin = strings.NewReader(`{"faults":[{"name":"loss5","permyriad":500}],"sizes":[1],"volume":1,"record_size":1}`)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), ErrNotPrivateNetns.Error()) {
		t.Fatalf("child in the parent's namespace: err %v, output %q; want a refusal", err, out)
	}
}

func TestLossRuleset(t *testing.T) {
	for _, tc := range []struct {
		fault string
		rule  string
	}{
		{"loss0.1", "numgen random mod 10000 < 10 counter"},
		{"loss1", "numgen random mod 10000 < 100 counter"},
		{"loss5", "numgen random mod 10000 < 500 counter"},
	} {
		rs := lossRuleset(Profiles[tc.fault].lossPermyriad())
		if !strings.Contains(rs, tc.rule) || !strings.Contains(rs, "hook input") {
			t.Errorf("%s: ruleset lacks %q on the input hook:\n%s", tc.fault, tc.rule, rs)
		}
	}
	if rs := lossRuleset(0); strings.Contains(rs, " drop\n") || strings.Contains(rs, "numgen") {
		t.Errorf("loss0 ruleset drops:\n%s", rs)
	}
}

func TestParseNftCounters(t *testing.T) {
	text := "table inet bufsweep {\n\tcounter seen {\n\t\tpackets 120 bytes 9000\n\t}\n\n\tcounter dropped {\n\t\tpackets 6 bytes 400\n\t}\n}\n"
	c, err := parseNftCounters([]byte(text))
	if err != nil || c["seen"] != 120 || c["dropped"] != 6 {
		t.Fatalf("%v %v, want seen 120 dropped 6", c, err)
	}
	if _, err := parseNftCounters([]byte("table inet bufsweep {\n}\n")); err == nil {
		t.Error("no counters: want an error")
	}
}

// Delay is toxiproxy's, per chunk, and every delayed row says so.
func TestToxiproxyDelayIsLabelledPerChunk(t *testing.T) {
	rep, err := Run(ctxT(t), Options{Transports: []string{"tcp", "fifo"}, Sizes: []int{64 << 10}, Volume: 256 << 10, Runs: 1,
		Faults: []string{"none", "delay5ms"}})
	if err != nil {
		t.Fatal(err)
	}
	var delayed *Row
	for i, r := range rep.Rows {
		if r.Error != "" {
			t.Fatalf("%s %s: %s", r.Transport, r.Fault, r.Error)
		}
		if r.Fault == "delay5ms" {
			if r.Transport != "tcp" {
				t.Errorf("fault applied to %s", r.Transport)
			}
			delayed = &rep.Rows[i]
		}
	}
	if delayed == nil {
		t.Fatalf("no delayed row: %+v", rep.Rows)
	}
	if delayed.Engine != EngineToxiproxy || !strings.Contains(delayed.FaultDetail, "per chunk (not per packet)") {
		t.Errorf("delayed row: engine %q, detail %q", delayed.Engine, delayed.FaultDetail)
	}
	if delayed.ElapsedNs < int64(5*time.Millisecond) {
		t.Errorf("5 ms delay but the transfer took %v", time.Duration(delayed.ElapsedNs))
	}
	if !strings.Contains(strings.Join(rep.Notes, "\n"), "not each packet") {
		t.Errorf("notes do not say the delay is not per packet: %q", rep.Notes)
	}
}

// Without root (or nft) the loss rows are left out and a note says why.
func TestLossRowsSkippedWithANote(t *testing.T) {
	o := Options{Transports: []string{"tcp"}, Faults: []string{"none", "loss1"}}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	rows, notes := plan(&o, "needs root")
	for _, r := range rows {
		if r.Fault == "loss1" {
			t.Errorf("loss row planned without root: %+v", r)
		}
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "loss1 skipped: needs root") {
		t.Errorf("notes %q", notes)
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Transports: []string{"udp"}},
		{Sizes: []int{0}},
		{Faults: []string{"earthquake"}},
		{Volume: -1},
		{Runs: -1},
	} {
		if _, err := Run(context.Background(), o); !errors.Is(err, ErrBadOptions) {
			t.Errorf("%+v: err %v, want ErrBadOptions", o, err)
		}
	}
}
