package latency

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipclab/logagg/internal/testenv"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == EchoSubcommand {
		os.Exit(EchoMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestMonoIsClockMonotonic(t *testing.T) {
	var ts unix.Timespec
	a := Mono()
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	b := Mono()
	k := ts.Nano()
	if k < a || k > b {
		t.Fatalf("CLOCK_MONOTONIC %d not between two Mono() reads %d and %d", k, a, b)
	}
}

func checkDist(t *testing.T, name string, d *Dist, n int64) {
	t.Helper()
	if d.RawCount != n {
		t.Errorf("%s: raw count %d, want %d", name, d.RawCount, n)
	}
	if d.CorrectedCount < d.RawCount {
		t.Errorf("%s: corrected count %d below raw %d", name, d.CorrectedCount, d.RawCount)
	}
	if !(d.Mean > 0 && d.P50 > 0 && d.P50 <= d.P99 && d.P99 <= d.P999 && d.P999 <= d.P9999 &&
		d.P9999 <= d.P99999 && d.P99999 <= d.Max) {
		t.Errorf("%s: percentiles out of order or zero: %+v", name, *d)
	}
	if len(d.Percentiles) != len(CurvePercentiles) {
		t.Fatalf("%s: %d curve points, want %d", name, len(d.Percentiles), len(CurvePercentiles))
	}
	if !slices.IsSortedFunc(d.Percentiles, func(a, b Point) int { return int(a.Ns - b.Ns) }) {
		t.Errorf("%s: percentile curve not monotonic: %v", name, d.Percentiles)
	}
}

func TestRawQuick(t *testing.T) {
	rep, err := Run(ctxT(t), Options{Quick: true, Modes: []string{ModeRaw}, Transports: RawTransports})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != len(RawTransports) {
		t.Fatalf("%d rows, want %d", len(rep.Rows), len(RawTransports))
	}
	for _, r := range rep.Rows {
		if r.Error != "" {
			t.Errorf("%s: %s", r.Transport, r.Error)
			continue
		}
		// Quick: 2000/s for 1 s measured after 100 ms of warm-up.
		if r.Sent != 2000 || r.Warmup != 200 {
			t.Errorf("%s: sent %d warm-up %d, want 2000 and 200", r.Transport, r.Sent, r.Warmup)
		}
		stream := r.Transport != "udp" && r.Transport != "unixgram"
		if stream && (r.Measured != int64(r.Sent) || r.Lost != 0) {
			t.Errorf("%s: measured %d lost %d of %d on a stream transport", r.Transport, r.Measured, r.Lost, r.Sent)
		}
		if !stream && (r.Measured+int64(r.Lost) != int64(r.Sent) || r.Measured == 0) {
			t.Errorf("%s: measured %d + lost %d != sent %d", r.Transport, r.Measured, r.Lost, r.Sent)
		}
		checkDist(t, r.Transport+" one-way", &r.OneWay, r.Measured)
		if r.RoundTrip == nil {
			t.Fatalf("%s: no round trip in raw mode", r.Transport)
		}
		checkDist(t, r.Transport+" round trip", r.RoundTrip, r.Measured)
		if !(r.OneWay.RawMean < r.RoundTrip.RawMean) {
			t.Errorf("%s: one-way mean %.0f not below round-trip mean %.0f", r.Transport, r.OneWay.RawMean, r.RoundTrip.RawMean)
		}
		if r.ElapsedNs < int64(900*time.Millisecond) || r.AchievedRate <= 0 {
			t.Errorf("%s: elapsed %d ns, achieved %.0f/s for a 1 s run", r.Transport, r.ElapsedNs, r.AchievedRate)
		}
		t.Logf("%s: n=%d lost=%d 1w mean %.1fµs p99 %.1fµs max %.1fµs; rt mean %.1fµs p99 %.1fµs max %.1fµs; late %d",
			r.Transport, r.Measured, r.Lost, r.OneWay.Mean/1e3, r.OneWay.P99/1e3, r.OneWay.Max/1e3,
			r.RoundTrip.Mean/1e3, r.RoundTrip.P99/1e3, r.RoundTrip.Max/1e3, r.LateSends)
	}
	var out bytes.Buffer
	if err := WriteSeedTable(&out, rep.Rows); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"latency (microseconds) |     ~ one way |     round trip |", "99.999th percentile", "worst",
		"Based on 2000 measurements.", "between the first measured message sent and the last received"} {
		if !strings.Contains(s, want) {
			t.Errorf("seed table lacks %q:\n%s", want, s)
		}
	}
	if testing.Verbose() {
		t.Log("\n" + s)
	}
}

func TestThroughAggregatorSeesEveryRecord(t *testing.T) {
	bin := testenv.Binary(t, "aggregator")
	dir := testenv.ShortTempDir(t)
	rep, err := Run(ctxT(t), Options{Quick: true, Modes: []string{ModeAggregator}, Transports: []string{"unixsock"},
		AggregatorBin: bin, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Rows[0]
	if r.Error != "" {
		t.Fatal(r.Error)
	}
	if r.Measured != int64(r.Sent) || r.Sent != 2000 || r.Lost != 0 {
		t.Fatalf("measured %d of %d sent (lost %d): every record must reach the file", r.Measured, r.Sent, r.Lost)
	}
	if r.RoundTrip != nil {
		t.Error("aggregator mode has no round trip")
	}
	checkDist(t, "aggregator one-way", &r.OneWay, r.Measured)
	t.Logf("aggregator unixsock: mean %.1fµs p50 %.1fµs p99 %.1fµs p99.99 %.1fµs max %.1fµs",
		r.OneWay.Mean/1e3, r.OneWay.P50/1e3, r.OneWay.P99/1e3, r.OneWay.P9999/1e3, r.OneWay.Max/1e3)
}

func TestDeadEchoSideIsAnError(t *testing.T) {
	rep, err := Run(ctxT(t), Options{Quick: true, Modes: []string{ModeRaw}, Transports: []string{"unixsock"}, Exe: "/bin/false", EchoArgs: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rows[0].Error == "" || !strings.Contains(rep.Rows[0].Error, "echo side") {
		t.Fatalf("want an echo-side error, got %+v", rep.Rows[0])
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Size: 8},
		{Rate: -1},
		{Transports: []string{"carrier-pigeon"}},
		{Modes: []string{ModeAggregator}},
		{Modes: []string{"sideways"}},
	} {
		if _, err := Run(context.Background(), o); !errors.Is(err, ErrBadOptions) {
			t.Errorf("%+v: err %v, want ErrBadOptions", o, err)
		}
	}
}
