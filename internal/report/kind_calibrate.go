package report

import (
	"fmt"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/calibrate"
)

func calibrateTable(rows []calibrate.Row) *bench.Table {
	t := &bench.Table{Header: []string{"operation", "median", "min", "max", "unit", "how"}}
	for _, r := range rows {
		t.Add(r.Name, fmt.Sprintf("%.2f", r.Median), fmt.Sprintf("%.2f", r.Min), fmt.Sprintf("%.2f", r.Max), r.Unit, r.Source)
	}
	return t
}
