package metrics

import (
	"bufio"
	"bytes"
	"os"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// MemKind is one kind of buffer the daemon holds (logagg_memory_bytes{kind}).
type MemKind int

// The buffers, each counted by whoever allocates and frees it. They are
// parts of the Go heap (go_heap), except shm_rings (shared memory, in
// rss_shmem).
const (
	MemReadBuffers     MemKind = iota // stream read buffers (a loop's scratch per listener, pipe readers), POSIX queue buffers
	MemDatagramVectors                // recvmmsg receive vectors of datagram sockets
	MemQueuedBatches                  // batches waiting in the outputs' queues
	MemOpenBatches                    // batches being filled by inputs or written by writers
	MemDirectIO                       // the writers' aligned staging blocks for O_DIRECT
	MemPartialFrames                  // incomplete frames of stream connections, records files put together
	MemShmRings                       // shared-memory rings mapped for producers
	MemOTLPBodies                     // OTLP request bodies being read or ingested
	MemOTLPBodiesFree                 // free OTLP body buffers the receivers keep for the next request
	numMemKinds
)

var memKindNames = [numMemKinds]string{"read_buffers", "datagram_vectors", "queued_batches", "open_batches",
	"direct_io", "partial_frames", "shm_rings", "otlp_bodies", "otlp_bodies_free"}

// String is the kind's label value.
func (k MemKind) String() string { return memKindNames[k] }

// Memory counts the bytes of the daemon's buffers by kind, and exports them
// with the Go runtime's memory and the process's resident set as
// logagg_memory_bytes{kind}, read at scrape time:
//
//   - rss_anon, rss_file, rss_shmem: the resident set (/proc/self/status;
//     process_resident_memory_bytes is their sum). rss_file is mostly the
//     executable's code and read-only data.
//   - go_heap, go_heap_free, go_stacks, go_runtime: what the Go runtime
//     holds and has not returned to the OS (runtime/metrics), which the
//     soft memory limit bounds; together about rss_anon.
//   - the buffer kinds (MemKind): parts of go_heap (shm_rings of
//     rss_shmem).
//
// logagg_memory_budget_bytes{kind} exports the bounds the daemon derived
// from its memory budget (SetBudget). Safe for concurrent use; Add is one
// atomic add.
type Memory struct {
	held [numMemKinds]atomic.Int64

	mu     sync.Mutex
	budget map[string]int64

	bytesDesc, budgetDesc *prometheus.Desc
	samples               []metrics.Sample
}

// NewMemory returns a Memory nobody scrapes until it is registered.
func NewMemory() *Memory {
	m := &Memory{
		bytesDesc: prometheus.NewDesc("logagg_memory_bytes",
			"Memory by kind: the resident set (rss_*), the Go runtime's memory (go_*), and the buffers within them (docs/memory.md).",
			[]string{"kind"}, nil),
		budgetDesc: prometheus.NewDesc("logagg_memory_budget_bytes",
			"The bounds derived from limits.memory, by kind (docs/memory.md).", []string{"kind"}, nil),
	}
	for _, name := range goMemClasses {
		m.samples = append(m.samples, metrics.Sample{Name: name})
	}
	return m
}

// Add adds n (may be negative) to the bytes held of kind. A nil Memory
// counts nothing.
func (m *Memory) Add(k MemKind, n int64) {
	if m != nil {
		m.held[k].Add(n)
	}
}

// Held is the bytes held of kind.
func (m *Memory) Held(k MemKind) int64 { return m.held[k].Load() }

// SetBudget sets the bounds exported as logagg_memory_budget_bytes.
func (m *Memory) SetBudget(b map[string]int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.budget = b
}

// Describe implements prometheus.Collector.
func (m *Memory) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.bytesDesc
	ch <- m.budgetDesc
}

// Collect implements prometheus.Collector.
func (m *Memory) Collect(ch chan<- prometheus.Metric) {
	emit := func(kind string, v int64) {
		ch <- prometheus.MustNewConstMetric(m.bytesDesc, prometheus.GaugeValue, float64(v), kind)
	}
	for k := range numMemKinds {
		emit(k.String(), m.held[k].Load())
	}
	for kind, v := range ProcessRSS() {
		emit(kind, v)
	}
	m.mu.Lock()
	metrics.Read(m.samples)
	var class [len(goMemClasses)]int64
	for i, s := range m.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			class[i] = int64(s.Value.Uint64())
		}
	}
	for kind, v := range m.budget {
		ch <- prometheus.MustNewConstMetric(m.budgetDesc, prometheus.GaugeValue, float64(v), kind)
	}
	m.mu.Unlock()
	emit("go_heap", class[0])
	emit("go_heap_free", class[1]+class[2])
	emit("go_stacks", class[3]+class[4])
	emit("go_runtime", class[5]-class[0]-class[1]-class[2]-class[3]-class[4]-class[6])
}

// goMemClasses are the runtime/metrics the go_* kinds are made of; the
// order is Collect's.
var goMemClasses = [...]string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/stacks:bytes",
	"/memory/classes/os-stacks:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
}

// ProcessRSS reads this process's resident set by kind (rss_anon, rss_file,
// rss_shmem) from /proc/self/status; empty where that cannot be read.
func ProcessRSS() map[string]int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		for _, f := range [...]struct{ field, kind string }{{"RssAnon:", "rss_anon"}, {"RssFile:", "rss_file"}, {"RssShmem:", "rss_shmem"}} {
			if rest, ok := bytes.CutPrefix(line, []byte(f.field)); ok {
				fs := bytes.Fields(rest)
				if len(fs) > 0 {
					kb, _ := strconv.ParseInt(string(fs[0]), 10, 64)
					out[f.kind] = kb << 10
				}
			}
		}
	}
	return out
}
