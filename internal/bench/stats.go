package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Summary describes a set of samples. All values are in the unit of the
// samples (nanoseconds for every latency in ipcbench).
//
// Quantiles, the median included, use the nearest-rank definition: the
// q-quantile of n sorted samples is the sample at 1-based rank ceil(q*n).
// Every reported value is therefore a sample that really occurred, and
// Min <= Median <= Q95 <= Q99 <= Q999 <= Q9999 <= Max always holds. With
// fewer than 1/(1-q) samples a high quantile equals Max; N says how much a
// tail figure can be trusted. Stddev is the population standard deviation.
type Summary struct {
	N      int     `json:"n"`
	Mean   float64 `json:"mean"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Stddev float64 `json:"stddev"`
	Q95    float64 `json:"q95"`
	Q99    float64 `json:"q99"`
	Q999   float64 `json:"q999"`
	Q9999  float64 `json:"q9999"`
}

// Summarize computes a Summary of samples. It does not modify samples (it
// sorts a copy). An empty input yields a zero Summary.
func Summarize(samples []float64) Summary {
	n := len(samples)
	if n == 0 {
		return Summary{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	mean := sum / float64(n)
	var sq float64
	for _, v := range s {
		d := v - mean
		sq += d * d
	}
	return Summary{
		N:      n,
		Mean:   mean,
		Median: NearestRank(s, 0.5),
		Min:    s[0],
		Max:    s[n-1],
		Stddev: math.Sqrt(sq / float64(n)),
		Q95:    NearestRank(s, 0.95),
		Q99:    NearestRank(s, 0.99),
		Q999:   NearestRank(s, 0.999),
		Q9999:  NearestRank(s, 0.9999),
	}
}

// SummarizeDurations is Summarize over durations, in nanoseconds.
func SummarizeDurations(d []time.Duration) Summary {
	f := make([]float64, len(d))
	for i, v := range d {
		f[i] = float64(v)
	}
	return Summarize(f)
}

// NearestRank returns the q-quantile (0 < q <= 1) of sorted by the
// nearest-rank method: sorted[ceil(q*n)-1]. sorted must be ascending and
// non-empty.
func NearestRank(sorted []float64, q float64) float64 {
	n := len(sorted)
	// A small epsilon keeps ceil(0.95*100) at 95 despite 0.95*100 being
	// 95.00000000000001 in floating point.
	r := int(math.Ceil(q*float64(n) - 1e-9))
	if r < 1 {
		r = 1
	}
	if r > n {
		r = n
	}
	return sorted[r-1]
}

// MinTail is the fewest observations that must lie beyond a percentile for
// it to be reported. With fewer, the "percentile" is one of a handful of
// extreme samples (p99.999 of 100,000 samples is the single worst but
// one), and it moves with whichever sample happened to be slowest; the
// worst case is reported on its own.
const MinTail = 10

// Beyond is the number of n observations above the nearest-rank
// percentile p (0..100): n - ceil(n*p/100).
func Beyond(n int64, p float64) int64 {
	if n <= 0 || p >= 100 {
		return 0
	}
	// From 100-p rather than p/100 so that 99.99 % of 100,000 is 10, not 9.
	return int64(math.Floor(float64(n)*(100-p)/100 + 1e-9))
}

// Supported reports whether n observations support percentile p: at least
// MinTail of them lie beyond it.
func Supported(n int64, p float64) bool { return Beyond(n, p) >= MinTail }

// Unsupported is shown in tables in place of a percentile that its
// observation count cannot support (see Supported).
const Unsupported = "—"

// FormatPercentileNs is FormatNs for percentile p of n observations, or
// Unsupported when n cannot support p.
func FormatPercentileNs(ns float64, n int64, p float64) string {
	if !Supported(n, p) {
		return Unsupported
	}
	return FormatNs(ns)
}

// SupportNote says, for tables that show Unsupported, what it means and
// which of the percentiles ps (0..100) n observations support.
func SupportNote(n int64, ps ...float64) string {
	best := ""
	for _, p := range ps {
		if Supported(n, p) {
			best = "p" + strconv.FormatFloat(p, 'f', -1, 64)
		}
	}
	s := fmt.Sprintf("%s: fewer than %d of the n observations lie beyond that percentile, too few to estimate it", Unsupported, MinTail)
	if n > 0 {
		if best == "" {
			best = "none of them"
		}
		s += fmt.Sprintf(" (n = %d supports %s)", n, best)
	}
	return s
}
