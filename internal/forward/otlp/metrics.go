package otlp

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipclab/logagg/internal/forward/progress"
)

// fwdMetrics are the OTLP forwarder's own; its position's are package
// progress's.
type fwdMetrics struct {
	exported, requestBytes, errors, retries, rejected prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*fwdMetrics, error) {
	c := func(name, help string) prometheus.Counter { return progress.Counter("otlp", name, help) }
	m := &fwdMetrics{
		exported:     c("records_exported_total", "Records the OTLP endpoint accepted."),
		requestBytes: c("request_bytes_total", "Bytes of the accepted export requests, as sent (compressed)."),
		errors:       c("errors_total", "Export attempts that failed; each request is sent again (or split, when refused as it is)."),
		retries:      c("retries_total", "Requests sent again after a failure."),
		rejected:     c("records_rejected_total", "Records the endpoint refused for good (partial success, or refused alone); they are not sent again."),
	}
	if reg == nil {
		return m, nil
	}
	for _, col := range []prometheus.Collector{m.exported, m.requestBytes, m.errors, m.retries, m.rejected} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("otlp forwarder: register metrics: %w", err)
		}
	}
	return m, nil
}
