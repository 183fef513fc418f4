package bench

import (
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
