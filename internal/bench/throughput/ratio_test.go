package throughput

import "testing"

func TestVsBaseline(t *testing.T) {
	rows := []Row{
		{Transport: "unixsock", Producers: 1, Size: 100, RecordsPerS: 500},
		{Transport: "unixsock", Producers: 4, Size: 100, RecordsPerS: 700},
		{Transport: "shm", Producers: 1, Size: 100, RecordsPerS: 3500},
		{Transport: "shm", Producers: 4, Size: 100, RecordsPerS: 3500},
		{Transport: "shm", Producers: 4, Size: 1024, RecordsPerS: 900}, // no unixsock row at 1 KiB
	}
	got := VsBaseline(rows)
	want := []float64{0, 0, 7, 5, 0}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d (%s x%d %dB): %v, want %v", i, rows[i].Transport, rows[i].Producers, rows[i].Size, got[i], want[i])
		}
	}
}

func TestMedianRun(t *testing.T) {
	run := func(rate float64) *Measurement { return &Measurement{Rows: []Row{{RecordsPerS: rate}}} }
	runs := []*Measurement{run(3), run(1), run(2)}
	if got := MedianRun(runs).Rows[0].RecordsPerS; got != 2 {
		t.Errorf("median of 3, 1, 2: %v", got)
	}
	if got := MedianRun(append(runs, run(4))).Rows[0].RecordsPerS; got != 2 {
		t.Errorf("median of 3, 1, 2, 4 (lower middle): %v", got)
	}
	if runs[0].Rows[0].RecordsPerS != 3 {
		t.Error("MedianRun reordered its argument")
	}
	if MedianRun(nil) != nil {
		t.Error("MedianRun(nil) != nil")
	}
}
