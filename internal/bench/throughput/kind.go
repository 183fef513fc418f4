package throughput

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/harness"
)

// Kind is the subcommand and result kind of the throughput grid.
const Kind = "throughput"

// ErrBadOptions is returned (wrapped) by Options.Validate.
var ErrBadOptions = errors.New("bad throughput options")

// Output modes of Options.Output: where the aggregator writes.
const (
	OutputFile     = "file"     // direct I/O, every record accounted for by sequence number
	OutputBuffered = "buffered" // the file through the page cache (--direct-io=false)
	OutputNull     = "null"     // /dev/null; counts from its metrics
)

// Options are the grid of one throughput run: every transport × size ×
// producer count × buffer, measured Runs times over.
type Options struct {
	AggregatorBin, ProducerBin string
	Transports                 []string
	Sizes, Producers, Buffers  []int
	Duration                   time.Duration
	Rate                       int    // records/s per producer, 0 = flat out
	Format                     string // record format: json, raw, rfc3164, rfc5424
	Output                     string // OutputFile, OutputBuffered or OutputNull
	CPUs                       string // any, same or split (Spec.CPUs)
	Runs                       int
	Ack                        bool // unixsock and tcp producers in the acknowledged mode
	// Config, if set, is an aggregator configuration file (outputs,
	// rules) every cell runs with; "{dir}" in it becomes the cell's
	// directory, so its outputs land there. The grid's listeners and main
	// output are given as flags, which win over the file.
	Config string
	// Reference, if set, is measured in every cell whose transport it
	// serves, right after ours in the same pass, with the same producers
	// (rsyslog: ipcbench throughput --vs rsyslog), so each row sets our
	// producers' CPU per record and our peak RSS against its.
	Reference Reference
	// Progress, optional, counts cells.
	Progress *bench.Progress
}

// Reference is a daemon measured beside ours (Options.Reference).
type Reference interface {
	harness.Daemon
	// Supports reports whether it takes input over transport.
	Supports(transport string) bool
}

// Validate names the first bad field.
func (o *Options) Validate() error {
	switch o.Output {
	case OutputFile, OutputBuffered, OutputNull:
	default:
		return fmt.Errorf("%w: output %q: want file, buffered or null", ErrBadOptions, o.Output)
	}
	if err := ValidCPUs(o.CPUs); err != nil {
		return fmt.Errorf("%w: %w", ErrBadOptions, err)
	}
	if o.Runs < 1 {
		return fmt.Errorf("%w: runs %d: want at least 1", ErrBadOptions, o.Runs)
	}
	if len(o.Transports) == 0 || len(o.Sizes) == 0 || len(o.Producers) == 0 || len(o.Buffers) == 0 {
		return fmt.Errorf("%w: empty grid (transports, sizes, producers and buffers each need a value)", ErrBadOptions)
	}
	return nil
}

// Params are the Options saved in the result.
type Params struct {
	Transports []string `json:"transports"`
	Sizes      []int    `json:"sizes"`
	Producers  []int    `json:"producers"`
	Buffers    []int    `json:"buffers"`
	Duration   string   `json:"duration"`
	Rate       int      `json:"rate"`
	Format     string   `json:"format"`
	Output     string   `json:"output"`
	CPUs       string   `json:"cpus"`
	Runs       int      `json:"runs"`
	Ack        bool     `json:"ack,omitempty"`
	Config     string   `json:"config,omitempty"`
	Vs         string   `json:"vs,omitempty"` // the reference daemon's name
}

// Result is what Run returns.
type Result struct {
	Params Params
	Rows   []Row
	Notes  []string
}

// Run measures every cell of the grid. Each pass measures every cell once,
// so repeated cells are spread over the whole run (the machine's noise
// hits all transports alike) rather than measured back to back; each row
// is the cell's median pass by records/s. A cell that fails is a note, not
// an error; Run fails on bad options or a cancelled context.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	res := &Result{Params: Params{Transports: o.Transports, Sizes: o.Sizes, Producers: o.Producers, Buffers: o.Buffers,
		Duration: o.Duration.String(), Rate: o.Rate, Format: o.Format, Output: o.Output, CPUs: o.CPUs, Runs: o.Runs, Ack: o.Ack,
		Config: o.Config}}
	if o.Reference != nil {
		res.Params.Vs = o.Reference.Name()
		res.Notes = append(res.Notes, fmt.Sprintf("vs %[1]s: %[1]s served the cells of the transports it takes right after ours in each pass, with the same producers and format; \"prod vs %[1]s\" is our producers' CPU per record over theirs sending to %[1]s, \"RSS vs %[1]s\" our peak RSS over its", o.Reference.Name()))
	}
	var config []byte
	if o.Config != "" {
		b, err := os.ReadFile(o.Config)
		if err != nil {
			return nil, fmt.Errorf("%w: config: %w", ErrBadOptions, err)
		}
		config = b
		res.Notes = append(res.Notes, "--config "+o.Config+": every cell ran with its outputs and rules")
	}
	res.Notes = append(res.Notes, fmt.Sprintf("net.unix.max_dgram_qlen=%d: unix datagram senders block when that many datagrams are queued", bench.CollectHost().MaxDgramQlen))
	if o.Ack {
		res.Notes = append(res.Notes, "--ack: unixsock and tcp producers ran in the acknowledged mode (sent = records handed to the kernel; each waits for the aggregator's acknowledgements at exit)")
	}
	if o.Output == OutputNull {
		res.Notes = append(res.Notes, "--output null: the aggregator wrote to /dev/null; written = its records_out_total, so duplicates and reordering are not checked")
	}
	var aggArgs []string
	if o.Output == OutputBuffered {
		aggArgs = []string{"--direct-io=false"}
	}
	type cell struct {
		t            string
		size, n, buf int
		passes, refs []*Measurement
	}
	var cells []*cell
	for _, t := range o.Transports {
		for _, size := range o.Sizes {
			for _, n := range o.Producers {
				for _, buf := range o.Buffers {
					cells = append(cells, &cell{t: t, size: size, n: n, buf: buf})
				}
			}
		}
	}
	for pass := range o.Runs {
		for _, cl := range cells {
			dir, err := os.MkdirTemp("", "lgtp")
			if err != nil {
				return nil, err
			}
			o.Progress.SetLabel(fmt.Sprintf("%s %dB x%d", cl.t, cl.size, cl.n))
			args := aggArgs
			if config != nil {
				p := filepath.Join(dir, "aggregator.yaml")
				if err := os.WriteFile(p, bytes.ReplaceAll(config, []byte("{dir}"), []byte(dir)), 0o644); err != nil {
					return nil, err
				}
				args = append(append([]string(nil), aggArgs...), "--config", p)
			}
			spec := Spec{
				AggregatorBin: o.AggregatorBin, ProducerBin: o.ProducerBin, Dir: dir, Transports: []string{cl.t},
				Producers: cl.n, Size: cl.size, Duration: o.Duration, Rate: o.Rate, Buffer: cl.buf, Format: o.Format,
				DiscardOutput: o.Output == OutputNull, CPUs: o.CPUs, ExtraArgs: args, Ack: o.Ack,
			}
			m, err := Measure(ctx, spec)
			os.RemoveAll(dir)
			o.Progress.Add(1)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				res.Notes = append(res.Notes, fmt.Sprintf("pass %d: %s size=%d producers=%d buffer=%d: %v", pass+1, cl.t, cl.size, cl.n, cl.buf, err))
			}
			if m != nil {
				cl.passes = append(cl.passes, m)
			}
			if o.Reference == nil || !o.Reference.Supports(cl.t) {
				continue
			}
			if dir, err = os.MkdirTemp("", "lgtp"); err != nil {
				return nil, err
			}
			spec.Dir, spec.Daemon, spec.ExtraArgs, spec.DiscardOutput = dir, o.Reference, nil, false
			ref, err := Measure(ctx, spec)
			os.RemoveAll(dir)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				res.Notes = append(res.Notes, fmt.Sprintf("pass %d: %s on %s size=%d producers=%d buffer=%d: %v", pass+1, o.Reference.Name(), cl.t, cl.size, cl.n, cl.buf, err))
			}
			if ref != nil && len(ref.Rows) > 0 {
				cl.refs = append(cl.refs, ref)
			}
		}
	}
	for _, cl := range cells {
		m := MedianRun(cl.passes)
		if m == nil {
			continue
		}
		rows := append([]Row(nil), m.Rows...)
		if ref := MedianRun(cl.refs); ref != nil {
			r := ref.Rows[0]
			for i := range rows {
				rows[i].RefDaemon, rows[i].RefRecordsPerS, rows[i].RefProdCPUNs, rows[i].RefRSSKiB = r.Daemon, r.RecordsPerS, r.ProdCPUNs, r.DaemonRSSKiB
			}
		}
		res.Rows = append(res.Rows, rows...)
	}
	for i, vs := range VsBaseline(res.Rows) {
		res.Rows[i].VsUnixsock = vs
	}
	if o.Runs > 1 {
		res.Notes = append(res.Notes, fmt.Sprintf("each row is the median of %d passes by records/s (its other columns come from that pass)", o.Runs))
	}
	return res, nil
}

// Tables is the throughput kind's one table: what each transport carried,
// what was lost, and what it cost the aggregator and the producers.
func Tables(rows []Row) []bench.TitledTable {
	header := []string{"transport", "prods", "size", "buffer", "sent", "written", "lost", "dup", "reord", "kdrops",
		"records/s", "x " + BaselineTransport, "MB/s", "recv/offered", "agg ns/rec", "prod ns/rec", "agg RSS MiB"}
	ref := ""
	for _, r := range rows {
		if r.RefDaemon != "" {
			ref = r.RefDaemon
		}
	}
	if ref != "" {
		header = append(header, "x "+ref, "prod vs "+ref, "RSS vs "+ref)
	}
	t := &bench.Table{Header: header}
	vs := VsBaseline(rows)
	for i, r := range rows {
		cells := []any{r.Transport, r.Producers, bench.FormatSize(r.Size), bench.FormatSize(r.Buffer), r.Sent, r.Written, r.Lost, r.Duplicated,
			r.Reordered, r.KernelDrops, strconv.FormatFloat(r.RecordsPerS, 'f', 0, 64), FormatVs(vs[i]), fmt.Sprintf("%.1f", r.MBPerS),
			fmt.Sprintf("%.4f", r.Offered), fmt.Sprintf("%.0f", r.DaemonCPUNs), fmt.Sprintf("%.0f", r.ProdCPUNs),
			fmt.Sprintf("%.1f", float64(r.DaemonRSSKiB)/1024)}
		if ref != "" {
			cells = append(cells, FormatRatio(r.RecordsPerS, r.RefRecordsPerS), FormatRatio(r.ProdCPUNs, r.RefProdCPUNs),
				FormatRatio(float64(r.DaemonRSSKiB), float64(r.RefRSSKiB)))
		}
		t.Add(cells...)
	}
	return []bench.TitledTable{{Title: "producers → aggregator → file", Table: t}}
}
