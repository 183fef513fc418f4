package kafka

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipclab/logagg/internal/forward/progress"
)

// fwdMetrics are the Kafka forwarder's own; its position's are
// package progress's.
type fwdMetrics struct {
	produced, producedBytes, errors, retries prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*fwdMetrics, error) {
	c := func(name, help string) prometheus.Counter { return progress.Counter("kafka", name, help) }
	m := &fwdMetrics{
		produced:      c("records_produced_total", "Records Kafka acknowledged."),
		producedBytes: c("bytes_produced_total", "Value bytes of the records Kafka acknowledged."),
		errors:        c("errors_total", "Produce attempts that failed after kgo's own retries; each record is produced again."),
		retries:       c("retries_total", "Records produced again after a failure."),
	}
	if reg == nil {
		return m, nil
	}
	for _, col := range []prometheus.Collector{m.produced, m.producedBytes, m.errors, m.retries} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("kafka forwarder: register metrics: %w", err)
		}
	}
	return m, nil
}
