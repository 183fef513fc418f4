package transport

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ipclab/logagg/internal/budget"
	"github.com/ipclab/logagg/internal/metrics"
)

// The connections' memory share is reserved with the slot: at the share
// Admit waits (counted once as spent, its time as a memory_budget pause),
// a connection that ends lets the next in, and a wait that ends with its
// context holds nothing.
func TestAdmissionWaitsForConnectionsMemory(t *testing.T) {
	mem := budget.NewGate(2 * ConnCost)
	spent := prometheus.NewCounter(prometheus.CounterOpts{Name: "spent"})
	paused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "paused"}, []string{"cause"})
	a := NewAdmission(AdmissionConfig{Memory: mem, MemoryCost: ConnCost, Spent: spent,
		Paused: func(c string) prometheus.Counter { return paused.WithLabelValues(c) },
		Causes: []string{metrics.PauseMemoryBudget}})
	ctx := context.Background()
	for i := range 2 {
		if !a.Admit(ctx, 0) {
			t.Fatalf("connection %d of a share that holds two was not admitted", i+1)
		}
	}
	got := make(chan bool)
	go func() { got <- a.Admit(ctx, 0) }()
	select {
	case <-got:
		t.Fatal("a third connection was admitted with the share spent")
	case <-time.After(50 * time.Millisecond):
	}
	a.Release(0, true)
	if !<-got {
		t.Fatal("the connection waiting was not admitted once one ended")
	}
	if n := testutil.ToFloat64(spent); n != 1 {
		t.Fatalf("spent counted %v times, want 1", n)
	}
	if testutil.ToFloat64(paused.WithLabelValues(metrics.PauseMemoryBudget)) <= 0 {
		t.Fatal("the wait was not counted as a memory_budget pause")
	}

	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if a.Admit(cctx, 0) {
		t.Fatal("admitted with the share spent")
	}
	if mem.Held() != 2*ConnCost {
		t.Fatalf("held %d after a wait that gave up, want %d", mem.Held(), 2*ConnCost)
	}
	a.Release(0, true)
	a.Release(0, true)
	if mem.Held() != 0 {
		t.Fatalf("held %d once both connections are gone", mem.Held())
	}
}
