package daemon

import (
	"testing"

	"github.com/ipclab/logagg/internal/config"
)

// The OTLP receivers' max_inflight is added to the budget and to the Go
// runtime's soft limit, each receiver's own (its URL's, else the
// default); other listeners add nothing.
func TestBudgetCountsOTLPInflight(t *testing.T) {
	cfg := config.Default()
	base := NewBudget(cfg)
	cfg.Listen = []string{"otlp://127.0.0.1:4317?max_inflight=8MiB", "otlphttp://127.0.0.1:4318", "unix:///tmp/x.sock"}
	b := NewBudget(cfg)
	const want = 8<<20 + 16<<20
	if b.OTLPInflight != want {
		t.Fatalf("OTLPInflight %d, want %d", b.OTLPInflight, want)
	}
	if b.Total != base.Total+want || b.GoLimit != base.GoLimit+want {
		t.Fatalf("total %d, soft limit %d; want %d and %d", b.Total, b.GoLimit, base.Total+want, base.GoLimit+want)
	}
	if b.Map()["otlp_inflight"] != want {
		t.Fatalf("otlp_inflight not exported: %v", b.Map())
	}
}
