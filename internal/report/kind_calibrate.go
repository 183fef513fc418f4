package report

import (
	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/calibrate"
)

// calibrateTables renders calibrate's rows with the table the terminal
// prints (calibrate.Tables).
func calibrateTables(rows []calibrate.Row) []table {
	return fromTitled(calibrate.Tables(rows))
}

// fromTitled turns a kind's titled tables into the report's tables, the
// title becoming the caption.
func fromTitled(ts []bench.TitledTable) []table {
	out := make([]table, len(ts))
	for i, t := range ts {
		out[i] = table{caption: t.Title, t: t.Table}
	}
	return out
}
