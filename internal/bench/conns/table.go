package conns

import (
	"fmt"
	"strings"

	"github.com/ipclab/logagg/internal/bench"
)

// Compare fills each row's comparison with the 0-idle row of its
// transport (the first one without an error) and the targets it missed.
// Rows of a transport without such a row are compared on what needs no
// base: connections held, threads, loss.
func Compare(rows []Row) {
	base := map[string]int{}
	for i, r := range rows {
		if _, ok := base[r.Transport]; !ok && r.Idle == 0 && r.Error == "" && r.RecordsPerS > 0 {
			base[r.Transport] = i
		}
	}
	for i := range rows {
		r := &rows[i]
		r.VsNoIdle, r.RSSPerConn, r.IdleRSSPerConn, r.Compared, r.Missed = 0, 0, 0, false, nil
		miss := func(cond bool, name string) {
			if cond {
				r.Missed = append(r.Missed, name)
			}
		}
		miss(r.Held < int64(r.Idle), "held")
		miss(r.Threads > r.ThreadBound || r.ThreadsAfterClose > r.ThreadBound, "threads")
		if b, ok := base[r.Transport]; ok {
			r.Compared = true
			if b != i {
				r.VsNoIdle = r.RecordsPerS / rows[b].RecordsPerS
				miss(r.VsNoIdle < 1-RateTolerance, "rate")
				if r.Held > 0 {
					r.RSSPerConn = float64(r.RSSKiB-rows[b].RSSKiB) * 1024 / float64(r.Held)
					r.IdleRSSPerConn = float64(r.IdleRSSKiB-rows[b].IdleRSSKiB) * 1024 / float64(r.Held)
					miss(r.RSSPerConn > RSSPerConnBound, "rss")
				}
			}
		}
		miss(r.Lost > 0, "lost")
		miss(r.Error != "", "error")
	}
}

// Targets renders a row's verdict: "met", "missed: rate, rss", or, without
// a 0-idle row to compare with, what held of the rest.
func (r *Row) Targets() string {
	switch {
	case len(r.Missed) > 0:
		return "missed: " + strings.Join(r.Missed, ", ")
	case !r.Compared:
		return "no 0-idle row; rest met"
	}
	return "met"
}

func mib(kib int64) string { return fmt.Sprintf("%.1f", float64(kib)/1024) }

// Tables renders rows (after Compare) for the terminal and the report:
// one table, a line per transport and idle count.
func Tables(rows []Row) []bench.TitledTable {
	t := &bench.Table{Header: []string{"transport", "idle", "held", "prods", "records/s", "x 0 idle", "lost", "agg ns/rec",
		"threads", "bound", "threads ok", "after close", "idle RSS MiB", "RSS MiB", "idle B/conn", "B/conn", "fds", "fd limit", "setup s", "targets"}}
	for _, r := range rows {
		vs, perConn, idlePerConn := "-", "-", "-"
		if r.VsNoIdle > 0 {
			vs = fmt.Sprintf("%.2fx", r.VsNoIdle)
		}
		if r.Compared && r.Held > 0 && r.Idle > 0 {
			perConn, idlePerConn = fmt.Sprintf("%.0f", r.RSSPerConn), fmt.Sprintf("%.0f", r.IdleRSSPerConn)
		}
		ok := "yes"
		if r.Threads > r.ThreadBound || r.ThreadsAfterClose > r.ThreadBound {
			ok = "NO"
		}
		t.Add(r.Transport, r.Idle, r.Held, r.Producers, fmt.Sprintf("%.0f", r.RecordsPerS), vs, r.Lost, fmt.Sprintf("%.0f", r.RunCPUNs),
			r.Threads, r.ThreadBound, ok, r.ThreadsAfterClose, mib(r.IdleRSSKiB), mib(r.RSSKiB), idlePerConn, perConn,
			r.FDs, r.FDLimit, fmt.Sprintf("%.1f", r.SetupS), r.Targets())
	}
	return []bench.TitledTable{{Title: "idle connections held while producers run flat out", Table: t}}
}
