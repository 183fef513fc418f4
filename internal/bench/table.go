package bench

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Table is an aligned plain-text table for terminals. Columns whose cells
// all look numeric are right-aligned, others left-aligned.
type Table struct {
	Header []string
	Rows   [][]string
}

// TitledTable is one of a kind's tables with its title, as its Tables
// function returns them: the terminal prints them, the report renders the
// same values, so the two never disagree about a column (ADR 0037).
type TitledTable struct {
	Title string
	Table *Table
}

// WriteTables prints tables one after another, each under its title and
// a colon (when it has a title), a blank line between them.
func WriteTables(w io.Writer, tables []TitledTable) error {
	for i, tt := range tables {
		if i > 0 {
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
		if tt.Title != "" {
			if _, err := io.WriteString(w, tt.Title+":\n"); err != nil {
				return err
			}
		}
		if _, err := tt.Table.WriteTo(w); err != nil {
			return err
		}
	}
	return nil
}

// Add appends one row; cells are formatted with fmt.Sprint.
func (t *Table) Add(cells ...any) {
	row := make([]string, len(cells))
	for i, c := range cells {
		row[i] = fmt.Sprint(c)
	}
	t.Rows = append(t.Rows, row)
}

// WriteTo writes the table to w.
func (t *Table) WriteTo(w io.Writer) (int64, error) {
	cols := len(t.Header)
	for _, r := range t.Rows {
		cols = max(cols, len(r))
	}
	width := make([]int, cols)
	numeric := t.NumericColumns()
	for _, r := range append([][]string{t.Header}, t.Rows...) {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	line := func(r []string) {
		for i := 0; i < cols; i++ {
			c := ""
			if i < len(r) {
				c = r[i]
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i > 0 {
				b.WriteString("  ")
			}
			if numeric[i] {
				b.WriteString(pad + c)
			} else if i == cols-1 {
				b.WriteString(c)
			} else {
				b.WriteString(c + pad)
			}
		}
		b.WriteString("\n")
	}
	if len(t.Header) > 0 {
		line(t.Header)
		sep := make([]string, cols)
		for i := range sep {
			sep[i] = strings.Repeat("-", width[i])
		}
		line(sep)
	}
	for _, r := range t.Rows {
		line(r)
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

// NumericColumns marks the columns whose cells all look like numbers (or
// are empty, "-" or Unsupported), which text and HTML renderings right-align.
func (t *Table) NumericColumns() []bool {
	cols := len(t.Header)
	for _, r := range t.Rows {
		cols = max(cols, len(r))
	}
	num := make([]bool, cols)
	for i := range num {
		num[i] = true
	}
	for _, r := range t.Rows {
		for i, c := range r {
			if c != "" && c != "-" && c != Unsupported && !looksNumeric(c) {
				num[i] = false
			}
		}
	}
	return num
}

// looksNumeric: a number with an optional unit or suffix (1.5x, 12%, 3µs,
// 4KiB, 2.1M, 5*).
func looksNumeric(s string) bool {
	s = strings.TrimRight(s, "xµsmnuKiBMG%*")
	if s == "" {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && r != '.' && r != '-' && r != '+' && r != 'e' {
			return false
		}
	}
	return true
}

// FormatNs renders a nanosecond figure with a unit chosen for readability
// (ns below 10 µs shown as e.g. "5.61µs", large values in ms).
func FormatNs(ns float64) string {
	switch {
	case ns == 0:
		return "0"
	case ns < 1000:
		return fmt.Sprintf("%.0fns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%.2fµs", ns/1e3)
	default:
		return fmt.Sprintf("%.2fms", ns/1e6)
	}
}
