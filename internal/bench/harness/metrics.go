package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape of a Prometheus text endpoint, such as the
// aggregator's /metrics (RunningAggregator.Metrics), by metric family
// name. It is read with expfmt, Prometheus' own parser, so label order,
// escaping, exponents and histograms are read as Prometheus reads them.
type Metrics map[string]*dto.MetricFamily

// ParseMetrics reads the Prometheus text exposition format.
func ParseMetrics(r io.Reader) (Metrics, error) {
	// A TextParser must be made with a name validation scheme in
	// prometheus/common v0.72 (its zero value is invalid). UTF-8 accepts
	// every legacy name as well.
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return Metrics(fams), nil
}

// DefaultScrapeTimeout bounds ScrapeMetrics when ctx has no deadline.
const DefaultScrapeTimeout = 5 * time.Second

// ScrapeMetrics fetches url (http://HOST:PORT/metrics) and parses it.
func ScrapeMetrics(ctx context.Context, url string) (Metrics, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultScrapeTimeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	// The text format: a client that asked for nothing gets it, but say
	// so, since promhttp may otherwise negotiate another.
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: GET %s: %s", url, resp.Status)
	}
	return ParseMetrics(resp.Body)
}

// Sum is the sum of the samples of counter, gauge or untyped metric name
// whose labels include every name=value pair of match (every sample when
// match is empty); 0 when there are none.
func (m Metrics) Sum(name string, match map[string]string) float64 {
	var sum float64
	for _, s := range m.samples(name, match) {
		sum += value(s)
	}
	return sum
}

// ByLabel sums the samples of name (as Sum) per value of their label
// label; samples without it are left out.
func (m Metrics) ByLabel(name, label string, match map[string]string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range m.samples(name, match) {
		if v, ok := labelValue(s, label); ok {
			out[v] += value(s)
		}
	}
	return out
}

// Buckets returns the cumulative buckets of histogram name, upper bound
// (+Inf included) → observations at or below it, summed over the
// histogram's label sets whose labels include match; nil when there are
// none.
func (m Metrics) Buckets(name string, match map[string]string) map[float64]float64 {
	var out map[float64]float64
	for _, s := range m.samples(name, match) {
		h := s.GetHistogram()
		if h == nil {
			continue
		}
		if out == nil {
			out = map[float64]float64{}
		}
		for _, b := range h.GetBucket() {
			n := b.GetCumulativeCountFloat()
			if n == 0 {
				n = float64(b.GetCumulativeCount())
			}
			out[b.GetUpperBound()] += n
		}
	}
	return out
}

// samples are name's samples whose labels include match.
func (m Metrics) samples(name string, match map[string]string) []*dto.Metric {
	f := m[name]
	if f == nil {
		return nil
	}
	var out []*dto.Metric
	for _, s := range f.GetMetric() {
		ok := true
		for k, want := range match {
			if v, has := labelValue(s, k); !has || v != want {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, s)
		}
	}
	return out
}

func labelValue(s *dto.Metric, name string) (string, bool) {
	for _, l := range s.GetLabel() {
		if l.GetName() == name {
			return l.GetValue(), true
		}
	}
	return "", false
}

// value is a counter's, gauge's or untyped sample's value (0 for a
// histogram or summary: read those with Buckets).
func value(s *dto.Metric) float64 {
	switch {
	case s.Counter != nil:
		return s.GetCounter().GetValue()
	case s.Gauge != nil:
		return s.GetGauge().GetValue()
	case s.Untyped != nil:
		return s.GetUntyped().GetValue()
	}
	return 0
}
