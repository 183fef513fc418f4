package peers

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/ipclab/logagg/internal/bench/throughput"
)

// Cell is one transport × producers × size measured on every daemon.
type Cell struct {
	Transport string               `json:"transport"`
	Producers int                  `json:"producers"`
	Size      int                  `json:"size"`
	Rows      []throughput.Row     `json:"rows"` // one per daemon, ours first
	Configs   map[string]string    `json:"configs"`
	Results   []*throughput.Result `json:"-"`
}

// Compare runs the same workload (spec's producer settings, RFC 3164
// records, which every daemon parses) on ours and on each peer, one daemon
// at a time, for every transport, and returns one Cell per transport.
// Daemons that are not installed are skipped with a note on w.
func Compare(ctx context.Context, spec throughput.Spec, daemons []throughput.Daemon, w io.Writer) ([]Cell, error) {
	var cells []Cell
	for _, t := range spec.Transports {
		if !Supported(t) {
			continue
		}
		cell := Cell{Transport: t, Producers: spec.Producers, Size: spec.Size, Configs: map[string]string{}}
		for _, d := range daemons {
			dir, err := os.MkdirTemp("", "lgpeer")
			if err != nil {
				return nil, err
			}
			s := spec
			s.Daemon = d
			s.Dir = dir
			s.Transports = []string{t}
			s.Format = "rfc3164"
			res, err := throughput.Run(ctx, s)
			os.RemoveAll(dir)
			if err != nil {
				if strings.Contains(err.Error(), ErrUnavailable.Error()) {
					fmt.Fprintf(w, "peers: %s skipped: %v\n", d.Name(), err)
					continue
				}
				return cells, fmt.Errorf("%s over %s: %w", d.Name(), t, err)
			}
			cell.Rows = append(cell.Rows, res.Rows[0])
			cell.Configs[d.Name()] = res.Config
			cell.Results = append(cell.Results, res)
		}
		cells = append(cells, cell)
	}
	return cells, nil
}

// Table prints one line per daemon and cell with the ratio of our
// records/s to the peer's.
func Table(w io.Writer, cells []Cell) {
	fmt.Fprintf(w, "%-9s %5s %5s  %-10s %10s %10s %8s %12s %10s %12s\n",
		"transport", "prods", "size", "daemon", "sent", "written", "lost", "records/s", "ns CPU/rec", "ours/theirs")
	for _, c := range cells {
		var ours float64
		for _, r := range c.Rows {
			if r.Daemon == "logagg" {
				ours = r.RecordsPerS
			}
			ratio := "-"
			if r.Daemon != "logagg" && r.RecordsPerS > 0 && ours > 0 {
				ratio = fmt.Sprintf("%.2fx", ours/r.RecordsPerS)
			}
			cpu := r.DaemonCPUNs
			fmt.Fprintf(w, "%-9s %5d %5d  %-10s %10d %10d %8d %12.0f %10.0f %12s\n",
				c.Transport, c.Producers, c.Size, r.Daemon, r.Sent, r.Written, r.Lost, r.RecordsPerS, cpu, ratio)
		}
	}
}

// DefaultDaemons are ours, rsyslog and syslog-ng.
func DefaultDaemons(aggregatorBin string) []throughput.Daemon {
	return []throughput.Daemon{
		&throughput.Aggregator{Bin: aggregatorBin},
		Rsyslog{},
		SyslogNG{Prefix: SyslogNGPrefix()},
	}
}

// ConfigsDir writes each cell's configs under dir, so others can check the
// comparison is fair.
func ConfigsDir(dir string, cells []Cell) error {
	for _, c := range cells {
		for name, conf := range c.Configs {
			p := filepath.Join(dir, fmt.Sprintf("%s-%s.conf", name, c.Transport))
			if err := os.WriteFile(p, []byte(conf), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// Median merges repeated comparisons of the same cells (the same spec run
// several times, so runs[k][i] is the same cell in every run) into one: for
// each cell and daemon it keeps the row with the median records/s, whole,
// so its loss and CPU figures belong to the run it came from. With an even
// number of runs the lower middle row is kept. Cells or daemons missing
// from some runs are merged over the runs that have them.
func Median(runs [][]Cell) []Cell {
	if len(runs) == 0 {
		return nil
	}
	out := make([]Cell, len(runs[0]))
	for i, first := range runs[0] {
		merged := first
		merged.Rows = nil
		merged.Results = nil
		for _, d := range first.Rows {
			var rows []throughput.Row
			for _, run := range runs {
				if i >= len(run) {
					continue
				}
				for _, r := range run[i].Rows {
					if r.Daemon == d.Daemon {
						rows = append(rows, r)
					}
				}
			}
			merged.Rows = append(merged.Rows, throughput.MedianBy(rows, func(r throughput.Row) float64 { return r.RecordsPerS }))
		}
		out[i] = merged
	}
	return out
}
