package throughput

import (
	"fmt"
	"sort"
)

// BaselineTransport is the mechanism other rows are compared with: unix
// stream sockets, what syslog(3) and most loggers use.
const BaselineTransport = "unixsock"

// VsBaseline returns, for each row, its records/s over those of the
// BaselineTransport row with the same producers, size and buffer (0 for the
// baseline rows themselves and where the grid has no such row). This is how
// the README's "shm is N× unix stream" figures are read off one run.
func VsBaseline(rows []Row) []float64 {
	type key struct{ producers, size, buffer int }
	base := map[key]float64{}
	for _, r := range rows {
		if r.Transport == BaselineTransport {
			base[key{r.Producers, r.Size, r.Buffer}] = r.RecordsPerS
		}
	}
	out := make([]float64, len(rows))
	for i, r := range rows {
		if b := base[key{r.Producers, r.Size, r.Buffer}]; b > 0 && r.Transport != BaselineTransport {
			out[i] = r.RecordsPerS / b
		}
	}
	return out
}

// FormatVs renders a VsBaseline figure for a table: "6.80x", or "-" where
// there is none.
func FormatVs(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", v)
}

// FormatRatio renders ours over theirs for a table ("0.84x"), or "-" where
// either is missing.
func FormatRatio(ours, theirs float64) string {
	if ours <= 0 || theirs <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", ours/theirs)
}

// MedianBy returns the element of xs with the median rate (the lower
// middle one for an even count), leaving xs in its order, and the zero T
// for none. Repeated measurements are reported by one whole element, so
// that its loss and CPU figures belong with its rate: peers.Median and
// MedianRun both use it.
func MedianBy[T any](xs []T, rate func(T) float64) T {
	if len(xs) == 0 {
		var zero T
		return zero
	}
	sorted := append([]T(nil), xs...)
	sort.SliceStable(sorted, func(a, b int) bool { return rate(sorted[a]) < rate(sorted[b]) })
	return sorted[(len(sorted)-1)/2]
}

// MedianRun returns the run whose first row has the median records/s.
func MedianRun(runs []*Measurement) *Measurement {
	return MedianBy(runs, func(r *Measurement) float64 {
		if len(r.Rows) == 0 {
			return 0
		}
		return r.Rows[0].RecordsPerS
	})
}
