package peers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/throughput"
)

// Kind is the subcommand and result kind of the comparison with rsyslog
// and syslog-ng.
const Kind = "peers"

// Ours is the Daemon name of our aggregator in the rows.
const Ours = "logagg"

// ErrBadOptions is returned (wrapped) by Options.Validate.
var ErrBadOptions = errors.New("bad peers options")

// Options are the grid of one comparison: every size × producer count,
// each over every supported transport on every daemon, Runs times.
type Options struct {
	AggregatorBin, ProducerBin string
	// NullReaderBin is the binary whose NullReaderSubcommand reads and
	// discards (ipcbench itself); empty leaves the null-reader rows out.
	NullReaderBin string
	Transports    []string
	Sizes         []int
	Producers     []int
	Duration      time.Duration
	Rate          int    // records/s per producer, 0 = flat out
	CPUs          string // any, same or split (throughput.Spec.CPUs)
	Runs          int
}

// Validate names the first bad field.
func (o *Options) Validate() error {
	if err := throughput.ValidCPUs(o.CPUs); err != nil {
		return fmt.Errorf("%w: %w", ErrBadOptions, err)
	}
	if o.Runs < 1 {
		return fmt.Errorf("%w: runs %d: want at least 1", ErrBadOptions, o.Runs)
	}
	if len(o.Sizes) == 0 || len(o.Producers) == 0 || len(o.Transports) == 0 {
		return fmt.Errorf("%w: empty grid (transports, sizes and producers each need a value)", ErrBadOptions)
	}
	return nil
}

// Params are the Options saved in the result.
type Params struct {
	Transports []string `json:"transports"`
	Sizes      []int    `json:"sizes"`
	Producers  []int    `json:"producers"`
	Duration   string   `json:"duration"`
	Rate       int      `json:"rate"`
	Format     string   `json:"format"`
	CPUs       string   `json:"cpus"`
	Runs       int      `json:"runs"`
}

// Result is what Run returns.
type Result struct {
	Params Params
	Rows   []Row
	Notes  []string
}

// Run measures every cell on ours, the peers and the null reader. Peers
// that are not installed are skipped with a note.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	res := &Result{Params: Params{Transports: o.Transports, Sizes: o.Sizes, Producers: o.Producers, Duration: o.Duration.String(),
		Rate: o.Rate, Format: "rfc3164", CPUs: o.CPUs, Runs: o.Runs}}
	res.Notes = append(res.Notes,
		"every daemon gets the same producer binary sending RFC 3164 lines, one write per record, and writes JSON lines to a file; the configs are saved in this result",
		"null-reader reads the same sockets and discards everything: what the producers reach when the reader does no work; \"of null\" is each daemon's records/s over it (above 100% where reading less often makes the producers' writes cheaper)",
		"prod ns/rec is the producers' CPU per record: one producer cannot exceed 1e9/prod ns/rec records/s, and N producers and the daemon share the CPUs",
		fmt.Sprintf("net.unix.max_dgram_qlen=%d", bench.CollectHost().MaxDgramQlen))
	daemons := DefaultDaemons(o.AggregatorBin)
	if o.NullReaderBin != "" {
		daemons = append(daemons, NullReader{Bin: o.NullReaderBin})
	}
	skipped := map[string]bool{}
	for _, size := range o.Sizes {
		for _, n := range o.Producers {
			spec := throughput.Spec{ProducerBin: o.ProducerBin, Transports: o.Transports, Producers: n, Size: size, Duration: o.Duration, Rate: o.Rate, CPUs: o.CPUs}
			var repeated [][]Row
			for range o.Runs {
				got, notes, err := compare(ctx, spec, daemons)
				for _, n := range notes {
					if !skipped[n] {
						skipped[n] = true
						res.Notes = append(res.Notes, n)
					}
				}
				if err != nil {
					return nil, err
				}
				repeated = append(repeated, got)
			}
			res.Rows = append(res.Rows, Median(repeated)...)
		}
	}
	if o.Runs > 1 {
		res.Notes = append(res.Notes, fmt.Sprintf("each row is the median of %d runs by records/s (its other columns come from that run)", o.Runs))
	}
	return res, nil
}

// Tables is the comparison's one table: a line per cell and daemon, with
// our records/s over each peer's and every daemon's over the null reader's.
func Tables(rows []Row) []bench.TitledTable {
	ref := Rsyslog{}.Name()
	t := &bench.Table{Header: []string{"transport", "prods", "size", "daemon", "sent", "written", "lost", "records/s", "MB/s",
		"CPU ns/rec", "prod ns/rec", "RSS MiB", Ours + "/daemon", "of null", "prod vs " + ref, "RSS vs " + ref}}
	null := NullReader{}.Name()
	for _, c := range rows {
		var ours, nullRate float64
		var refRow throughput.Row
		for _, r := range c.Daemons {
			switch r.Daemon {
			case Ours:
				ours = r.RecordsPerS
			case null:
				nullRate = r.RecordsPerS
			case ref:
				refRow = r
			}
		}
		for _, r := range c.Daemons {
			ratio, ofNull := "-", "-"
			// The null reader is a reference, not a daemon to beat.
			if r.Daemon != Ours && r.Daemon != null && r.RecordsPerS > 0 && ours > 0 {
				ratio = fmt.Sprintf("%.2fx", ours/r.RecordsPerS)
			}
			if nullRate > 0 {
				ofNull = fmt.Sprintf("%.0f%%", 100*r.RecordsPerS/nullRate)
			}
			// Results saved before the daemon's CPU and RSS were measured
			// have zeros there: not measured, shown as "-".
			cpu, rss := "-", "-"
			if r.DaemonCPUNs > 0 {
				cpu, rss = fmt.Sprintf("%.0f", r.DaemonCPUNs), fmt.Sprintf("%.1f", float64(r.DaemonRSSKiB)/1024)
			}
			// What the same producers pay sending to this daemon, and its
			// peak RSS, over rsyslog's in the cell (the null reader's RSS
			// is not a daemon's: "-").
			prodVs, rssVs := "-", "-"
			if r.Daemon != ref {
				prodVs = throughput.FormatRatio(r.ProdCPUNs, refRow.ProdCPUNs)
				if r.Daemon != null {
					rssVs = throughput.FormatRatio(float64(r.DaemonRSSKiB), float64(refRow.DaemonRSSKiB))
				}
			}
			t.Add(c.Transport, c.Producers, bench.FormatSize(c.Size), r.Daemon, r.Sent, r.Written, r.Lost, fmt.Sprintf("%.0f", r.RecordsPerS),
				fmt.Sprintf("%.1f", r.MBPerS), cpu, fmt.Sprintf("%.0f", r.ProdCPUNs), rss, ratio, ofNull, prodVs, rssVs)
		}
	}
	return []bench.TitledTable{{Title: "the same producer against each daemon", Table: t}}
}
