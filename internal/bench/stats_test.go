package bench

import (
	"strings"
	"testing"
	"time"
)

func TestSummarizeNearestRank(t *testing.T) {
	s := make([]float64, 100)
	for i := range s {
		s[i] = float64(100 - i) // 100..1, unsorted on purpose
	}
	got := Summarize(s)
	if got.N != 100 || got.Min != 1 || got.Max != 100 {
		t.Fatalf("n/min/max = %d/%v/%v", got.N, got.Min, got.Max)
	}
	if got.Median != 50 || got.Q95 != 95 || got.Q99 != 99 || got.Q999 != 100 || got.Q9999 != 100 {
		t.Fatalf("quantiles: %+v", got)
	}
	if got.Mean != 50.5 {
		t.Fatalf("mean = %v", got.Mean)
	}
	if s[0] != 100 {
		t.Fatal("Summarize modified its input")
	}
	if d := got.Stddev - 28.866070047722115; d > 1e-9 || d < -1e-9 {
		t.Fatalf("stddev = %v", got.Stddev)
	}
}

func TestSummarizeEdge(t *testing.T) {
	if (Summarize(nil) != Summary{}) {
		t.Fatal("empty input should give zero summary")
	}
	one := Summarize([]float64{7})
	if one.Min != 7 || one.Median != 7 || one.Q9999 != 7 || one.Stddev != 0 {
		t.Fatalf("single: %+v", one)
	}
	d := SummarizeDurations([]time.Duration{time.Microsecond, 3 * time.Microsecond})
	if d.Median != 1000 || d.Max != 3000 {
		t.Fatalf("durations: %+v", d)
	}
}

// A percentile needs MinTail observations beyond it: 100,000 samples
// support p99.99 (10 beyond) but not p99.999 (1), 2,000 support p99.5 but
// not p99.9.
func TestPercentileSupport(t *testing.T) {
	for _, c := range []struct {
		n      int64
		p      float64
		beyond int64
		ok     bool
	}{
		{100_000, 99.99, 10, true},
		{100_000, 99.999, 1, false},
		{2000, 99, 20, true},
		{2000, 99.5, 10, true},
		{2000, 99.9, 2, false},
		{2000, 99.999, 0, false},
		{9, 0, 9, false},
		{10, 0, 10, true},
		{0, 50, 0, false},
		{1000, 100, 0, false},
	} {
		if b := Beyond(c.n, c.p); b != c.beyond {
			t.Errorf("Beyond(%d, %v) = %d, want %d", c.n, c.p, b, c.beyond)
		}
		if ok := Supported(c.n, c.p); ok != c.ok {
			t.Errorf("Supported(%d, %v) = %v, want %v", c.n, c.p, ok, c.ok)
		}
	}
	if s := FormatPercentileNs(1500, 2000, 99.9); s != Unsupported {
		t.Errorf("p99.9 of 2000 shown as %q", s)
	}
	if s := FormatPercentileNs(1500, 2000, 99); s != "1.50µs" {
		t.Errorf("p99 of 2000 shown as %q", s)
	}
	if n := SupportNote(2000, 50, 99, 99.9, 99.99); !strings.Contains(n, "n = 2000 supports p99)") {
		t.Errorf("note %q", n)
	}
}
