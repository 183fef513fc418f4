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
	cfg.Listen = []string{"otlp://127.0.0.1:4317?max_inflight=8MiB", "otlphttp://127.0.0.1:4318", "unix:///tmp/x.sock",
		"otlp+unix:///tmp/otlp.sock?max_inflight=12MiB", "otlphttp+unix:///tmp/otlp-http.sock?max_inflight=10MiB"}
	b := NewBudget(cfg)
	const want = 8<<20 + 16<<20 + 12<<20 + 10<<20
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

// With the default settings the soft limit is the budget less the code,
// whatever the listeners (the shares and the rest add up to it); a setting
// given explicitly that takes more than its share raises it by that much.
func TestBudgetSoftLimitIsTheRestOfTheBudget(t *testing.T) {
	for _, listen := range [][]string{
		{"unix:///tmp/x.sock"},
		{"unixgram:///tmp/x.sock"},
		{"udp://127.0.0.1:514", "unixgram:///tmp/x.sock", "tcp://127.0.0.1:514"},
	} {
		cfg := config.Default()
		cfg.Listen = listen
		b := NewBudget(cfg)
		if want := b.Total - b.Code; b.GoLimit > want {
			t.Errorf("%v: soft limit %d, over the budget less the code (%d) by %d", listen, b.GoLimit, want, b.GoLimit-want)
		}
		// The datagram vectors' share, unused without datagram sockets
		// (and partly with one), goes first.
		cfg.Limits.MaxPartial = config.ByteSize(b.Partial + 16<<20)
		if got, g := NewBudget(cfg).GoLimit, b.Total-b.Code; got < b.GoLimit+16<<20-g*2/32 {
			t.Errorf("%v: max_partial 16 MiB over its share raised the soft limit only by %d", listen, got-b.GoLimit)
		}
	}
}
