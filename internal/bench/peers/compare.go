package peers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ipclab/logagg/internal/bench/harness"
	"github.com/ipclab/logagg/internal/bench/throughput"
)

// Row is one transport × producers × size measured on every daemon.
type Row struct {
	Transport string `json:"transport"`
	Producers int    `json:"producers"`
	Size      int    `json:"size"`
	// Daemons has one row per daemon, ours first.
	Daemons []throughput.Row  `json:"rows"`
	Configs map[string]string `json:"configs"`
}

// compare runs the same workload (spec's producer settings, RFC 3164
// records, which every daemon parses) on ours and on each peer, one daemon
// at a time, for every transport, and returns one Row per transport.
// Daemons that are not installed are skipped, each with a note.
func compare(ctx context.Context, spec throughput.Spec, daemons []harness.Daemon) (cells []Row, notes []string, err error) {
	for _, t := range spec.Transports {
		if !Supported(t) {
			continue
		}
		cell := Row{Transport: t, Producers: spec.Producers, Size: spec.Size, Configs: map[string]string{}}
		for _, d := range daemons {
			dir, err := os.MkdirTemp("", "lgpeer")
			if err != nil {
				return nil, nil, err
			}
			s := spec
			s.Daemon = d
			s.Dir = dir
			s.Transports = []string{t}
			s.Format = "rfc3164"
			res, err := throughput.Measure(ctx, s)
			os.RemoveAll(dir)
			if err != nil {
				if strings.Contains(err.Error(), ErrUnavailable.Error()) {
					notes = append(notes, fmt.Sprintf("%s over %s skipped: %v", d.Name(), t, err))
					continue
				}
				return cells, notes, fmt.Errorf("%s over %s: %w", d.Name(), t, err)
			}
			cell.Daemons = append(cell.Daemons, res.Rows[0])
			cell.Configs[d.Name()] = res.Config
		}
		cells = append(cells, cell)
	}
	return cells, notes, nil
}

// DefaultDaemons are ours, rsyslog and syslog-ng.
func DefaultDaemons(aggregatorBin string) []harness.Daemon {
	return []harness.Daemon{
		&harness.AggregatorDaemon{Bin: aggregatorBin},
		Rsyslog{},
		SyslogNG{Prefix: SyslogNGPrefix()},
	}
}

// ConfigsDir writes each cell's configs under dir, so others can check the
// comparison is fair.
func ConfigsDir(dir string, cells []Row) error {
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
func Median(runs [][]Row) []Row {
	if len(runs) == 0 {
		return nil
	}
	out := make([]Row, len(runs[0]))
	for i, first := range runs[0] {
		merged := first
		merged.Daemons = nil
		for _, d := range first.Daemons {
			var rows []throughput.Row
			for _, run := range runs {
				if i >= len(run) {
					continue
				}
				for _, r := range run[i].Daemons {
					if r.Daemon == d.Daemon {
						rows = append(rows, r)
					}
				}
			}
			merged.Daemons = append(merged.Daemons, throughput.MedianBy(rows, func(r throughput.Row) float64 { return r.RecordsPerS }))
		}
		out[i] = merged
	}
	return out
}
