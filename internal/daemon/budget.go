package daemon

import (
	"net/url"

	"github.com/ipclab/logagg/internal/config"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/otlp"
)

// Budget is what the daemon derives from limits.memory (docs/memory.md):
// every buffer that grows with load or with peers has a share, so that
// the resident set stays within the budget whatever the peers send.
//
//	limits.memory
//	├── code: the executable's and libc's resident pages (an allowance)
//	└── the Go runtime's soft limit
//	    ├── outputs, 9/32: each file output's queue (3/4, split between
//	    │   them), and what writes gather and stage for O_DIRECT (1/4,
//	    │   shared: an output writes up to 1/8 at a time while the others
//	    │   leave the room, and always its part of the split)
//	    ├── incomplete frames, 5/32 (limits.max_partial when set)
//	    ├── connections, 6/32: 2 KiB per stream connection, 32 KiB per
//	    │   OTLP gRPC one, a shm producer its ring too; at the limit
//	    │   listeners stop accepting
//	    ├── datagram receive vectors, 2/32, split between the sockets
//	    └── the rest, 10/32: the runtime, read buffers, batches being
//	        filled, and room for the collector to work
//
// The outputs' share is the one records/s feel (the size of each write);
// the shares of incomplete frames and connections only bound what hostile
// or unusual peers can hold.
//
// Settings given explicitly (max_partial, queue.batches) take their own
// size, and the soft limit grows to cover them. The OTLP receivers'
// max_inflight and the forwarders' allowances are added on top.
type Budget struct {
	Total   int64 // limits.memory (plus the OTLP receivers' and the forwarders' allowances)
	Code    int64 // allowance for resident code and read-only data
	GoLimit int64 // the Go runtime's soft memory limit

	Queue int64 // bytes of buffers each file output's queue holds
	// Write is what one write of an output gathers (and stages) whatever
	// the others hold; WriteMax what it gathers while WriteRoom, shared by
	// all file outputs' writes (gathered and staged), has room left. An
	// output that is busy while the others are idle (the syslog file among
	// Debian's six) then writes as much at a time as a lone one: with the
	// split alone, six outputs wrote 132 KiB at a time instead of 792 KiB,
	// and each direct write costs a device request and a VM exit.
	Write, WriteMax, WriteRoom int64
	Partial                    int64 // incomplete frames of all stream connections
	Conns                      int64 // connections: ConnCost each, shm producers their ring too
	DgramVector                int64 // receive vector of one datagram socket
	ShmRing                    int64 // ring of a shm producer whose URL gives no size
	// OTLPInflight is the OTLP receivers' max_inflight, summed: the
	// request bodies they hold, being received or not yet written. Each
	// receiver's own bound (its URL's), added to Total as the forwarders'
	// allowances are.
	OTLPInflight int64

	FileOutputs, DgramSockets int
}

// codeAllowance is what limits.memory keeps for pages that are not the Go
// runtime's: the executable's code and read-only data that the daemon
// touches while it runs (start-up touches most of it and the daemon drops
// those pages once it serves: dropCodePages), and libc's and the loader's.
// Under a flood, the pages it maps again were 8.5 MiB of the executable
// (text, read-only data and the function tables that stack scans read,
// each touched page bringing its 64 KiB fault-around window) and 1.1 MiB
// of libc and the loader (/proc/PID/pagemap, 2026-11-27): 8 MiB left the
// resident set up to 2 MiB over limits.memory.
const codeAllowance = 10 << 20

// kafkaAllowance is added to the budget when the Kafka forwarder runs: its
// client's produce buffers are its own.
const kafkaAllowance = 128 << 20

// otlpForwardAllowance is added when the OTLP forwarder runs: its batches
// in flight, as lines and as requests, and each sender's encoder, a few
// times batch_bytes per sender.
const otlpForwardAllowance = 64 << 20

// NewBudget derives the budget of cfg.
func NewBudget(cfg config.Config) Budget {
	b := Budget{Total: int64(cfg.Limits.Memory), Code: codeAllowance}
	if b.Total <= 0 {
		b.Total = config.DefaultMemory
	}
	for _, o := range cfg.OutputList() {
		if o.Type != config.OutputDiscard {
			b.FileOutputs++
		}
	}
	for _, raw := range cfg.Listen {
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}
		switch u.Scheme {
		case "udp", "unixgram":
			b.DgramSockets++
		case otlp.SchemeGRPC, otlp.SchemeGRPCUnix, otlp.SchemeHTTP, otlp.SchemeHTTPUnix:
			if p, err := otlp.ParseParams(u.Scheme, u.Query()); err == nil {
				b.OTLPInflight += int64(p.MaxInflight)
			}
		}
	}
	g := b.Total - b.Code
	batch := int64(cfg.Queue.BatchBytes)
	maxRecord := int64(cfg.Limits.MaxRecord)

	out := g * 9 / 32 / int64(max(b.FileOutputs, 1))
	b.Queue = max(out*3/4, 4*batch)
	if cfg.Queue.Batches > 0 {
		b.Queue = int64(cfg.Queue.Batches) * batch
	}
	b.Write = max(out/8, 2*batch)
	b.WriteMax = max(g*9/32/8, b.Write)
	b.WriteRoom = 2 * b.WriteMax

	b.Partial = max(g*5/32, 2*maxRecord)
	if cfg.Limits.MaxPartial > 0 {
		b.Partial = int64(cfg.Limits.MaxPartial)
	}
	b.Conns = g * 6 / 32
	// A ring is a quarter of the connections' share (4 MiB at most, the
	// ring's own default), so that four producers fit.
	b.ShmRing = min(b.Conns/4, 4<<20)
	b.DgramVector = min(g*2/32/int64(max(b.DgramSockets, 1)), transport.DefaultDgramVector)

	// The soft limit: the budget without the code, or what the settings
	// given explicitly need beside the rest's 10/32, whichever is more. A
	// fixed 8 MiB for the rest put the default soft limit 1.1 MiB over
	// the budget with a datagram socket, and a unix datagram cell 0.4 MiB
	// over limits.memory (2026-11-27): the shares are of the budget, so
	// with the defaults they and the rest make exactly g.
	need := int64(b.FileOutputs)*b.Queue + max(b.WriteRoom, int64(b.FileOutputs)*2*b.Write) + b.Partial + b.Conns + int64(b.DgramSockets)*b.DgramVector + g*10/32
	b.GoLimit = max(g, need)
	b.Total += b.OTLPInflight
	b.GoLimit += b.OTLPInflight
	if cfg.KafkaConfig() != nil {
		b.Total += kafkaAllowance
		b.GoLimit += kafkaAllowance
	}
	if cfg.OTLPConfig() != nil {
		b.Total += otlpForwardAllowance
		b.GoLimit += otlpForwardAllowance
	}
	return b
}

// Options sets the listeners' share of the budget in o.
func (b Budget) Options(o *transport.Options) {
	o.MaxPartialBytes = b.Partial
	o.DgramVector = int(b.DgramVector)
	o.ShmRing = int(b.ShmRing)
}

// Map is the budget by kind, as logagg_memory_budget_bytes exports it.
func (b Budget) Map() map[string]int64 {
	return map[string]int64{
		"total": b.Total, "code": b.Code, "go_limit": b.GoLimit,
		"queue_per_output": b.Queue, "write_per_output": b.Write, "write_max": b.WriteMax, "write_shared": b.WriteRoom,
		"partial_frames": b.Partial, "connections": b.Conns,
		"datagram_vector_per_socket": b.DgramVector, "shm_ring": b.ShmRing,
		"otlp_inflight": b.OTLPInflight,
	}
}

// Attrs is the budget as log attributes (the start-up report).
func (b Budget) Attrs() []any {
	return []any{"total", size(b.Total), "go_soft_limit", size(b.GoLimit),
		"queue_per_output", size(b.Queue), "file_outputs", b.FileOutputs, "write_per_output", size(b.Write),
		"write_max", size(b.WriteMax), "write_shared", size(b.WriteRoom),
		"partial_frames", size(b.Partial), "connections", size(b.Conns),
		"max_connections", b.Conns / transport.ConnCost, "shm_ring", size(b.ShmRing),
		"datagram_vector_per_socket", size(b.DgramVector), "datagram_sockets", b.DgramSockets,
		"otlp_inflight", size(b.OTLPInflight)}
}

func size(n int64) string { return config.ByteSize(n).String() }

// MemoryLimit is the soft limit the daemon gives the Go runtime unless
// GOMEMLIMIT is set (Budget.GoLimit). The collector then works harder near
// the bound instead of letting the heap grow to twice what is live, which
// put RSS at three times the partial-frame budget under a flood of
// incomplete records. It is soft: it never makes an allocation fail.
func MemoryLimit(cfg config.Config) int64 { return NewBudget(cfg).GoLimit }
