package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/peers"
	"github.com/ipclab/logagg/internal/bench/throughput"
)

func init() {
	register(&command{name: "peers", summary: "the throughput workload against rsyslog and syslog-ng, side by side", run: runPeers})
	// Hidden: the null-reader row of peers and demo, started by ipcbench itself.
	register(&command{name: peers.NullReaderSubcommand, summary: "(internal) the null reader of `ipcbench peers`", run: func(_ context.Context, args []string) error {
		if code := peers.NullReaderMain(args); code != 0 {
			os.Exit(code)
		}
		return nil
	}})
}

// comparedDaemons are ours, the peers, and the null reader: what the same
// producers reach when the reader does no work.
func comparedDaemons(agg string) ([]throughput.Daemon, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return append(peers.DefaultDaemons(agg), peers.NullReader{Bin: self}), nil
}

type peersParams struct {
	Transports []string `json:"transports"`
	Sizes      []int    `json:"sizes"`
	Producers  []int    `json:"producers"`
	Duration   string   `json:"duration"`
	Rate       int      `json:"rate"`
	Format     string   `json:"format"`
	CPUs       string   `json:"cpus"`
	Runs       int      `json:"runs"`
}

func runPeers(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	var c bench.Common
	c.Register(fs, "unixsock,tcp,unixgram,udp", "100")
	producers := fs.String("producers", "1,4", "comma-separated producer counts")
	dur := fs.Duration("duration", 5*time.Second, "how long producers send in each cell")
	rate := fs.Int("rate", 0, "records/s per producer (0 = as fast as possible)")
	cpus := fs.String("cpus", "any", cpusUsage)
	runs := fs.Int("runs", 1, "run every cell this many times, daemons interleaved, and report the run with the median records/s per daemon")
	configs := fs.String("configs", "", "also write every daemon's configuration into `DIR`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.Quick {
		*dur = time.Second
	}
	if err := throughput.ValidCPUs(*cpus); err != nil {
		return err
	}
	if *runs < 1 {
		return fmt.Errorf("--runs %d: want at least 1", *runs)
	}
	prodCounts, err := intList(*producers)
	if err != nil {
		return err
	}
	agg, prod, err := workloadBinaries()
	if err != nil {
		return err
	}
	res := bench.NewResult("peers", peersParams{Transports: c.Transports, Sizes: c.Sizes, Producers: prodCounts, Duration: dur.String(), Rate: *rate, Format: "rfc3164", CPUs: *cpus, Runs: *runs})
	res.Notes = append(res.Notes,
		"every daemon gets the same producer binary sending RFC 3164 lines, one write per record, and writes JSON lines to a file; the configs are saved in this result",
		"null-reader reads the same sockets and discards everything: what the producers reach when the reader does no work; \"of null\" is each daemon's records/s over it (above 100% where reading less often makes the producers' writes cheaper)",
		"prod ns/rec is the producers' CPU per record: one producer cannot exceed 1e9/prod ns/rec records/s, and N producers and the daemon share the CPUs",
		fmt.Sprintf("net.unix.max_dgram_qlen=%d", res.Host.MaxDgramQlen))
	daemons, err := comparedDaemons(agg)
	if err != nil {
		return err
	}
	var cells []peers.Cell
	for _, size := range c.Sizes {
		for _, n := range prodCounts {
			spec := throughput.Spec{ProducerBin: prod, Transports: c.Transports, Producers: n, Size: size, Duration: *dur, Rate: *rate, CPUs: *cpus}
			var repeated [][]peers.Cell
			for range *runs {
				got, err := peers.Compare(ctx, spec, daemons, os.Stderr)
				if err != nil {
					return err
				}
				repeated = append(repeated, got)
			}
			cells = append(cells, peers.Median(repeated)...)
		}
	}
	if *runs > 1 {
		res.Notes = append(res.Notes, fmt.Sprintf("each row is the median of %d runs by records/s (its other columns come from that run)", *runs))
	}
	res.Rows = cells
	if *configs != "" {
		if err := os.MkdirAll(*configs, 0o755); err != nil {
			return err
		}
		if err := peers.ConfigsDir(*configs, cells); err != nil {
			return err
		}
		res.Notes = append(res.Notes, "configs written to "+filepath.Clean(*configs))
	}
	return finish(&c, res, peersTable(cells))
}

func peersTable(cells []peers.Cell) *bench.Table {
	t := &bench.Table{Header: []string{"transport", "prods", "size", "daemon", "sent", "written", "lost", "records/s", "CPU ns/rec", "prod ns/rec", "RSS MiB", "logagg/daemon", "of null"}}
	for _, c := range cells {
		var ours, null float64
		for _, r := range c.Rows {
			switch r.Daemon {
			case "logagg":
				ours = r.RecordsPerS
			case peers.NullReader{}.Name():
				null = r.RecordsPerS
			}
		}
		for _, r := range c.Rows {
			ratio, ofNull := "-", "-"
			if r.Daemon != "logagg" && r.Daemon != (peers.NullReader{}).Name() && r.RecordsPerS > 0 {
				ratio = fmt.Sprintf("%.2fx", ours/r.RecordsPerS)
			}
			if null > 0 {
				ofNull = fmt.Sprintf("%.0f%%", 100*r.RecordsPerS/null)
			}
			t.Add(c.Transport, c.Producers, c.Size, r.Daemon, r.Sent, r.Written, r.Lost, fmt.Sprintf("%.0f", r.RecordsPerS),
				fmt.Sprintf("%.0f", r.DaemonCPUNs), fmt.Sprintf("%.0f", r.ProdCPUNs), fmt.Sprintf("%.1f", float64(r.DaemonRSSKiB)/1024), ratio, ofNull)
		}
	}
	return t
}
