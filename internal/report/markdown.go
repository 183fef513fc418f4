package report

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// WriteMarkdown writes the summary: the same sections, tables and notes as
// the HTML report, with the plots listed by title (they live in the HTML).
// The output depends only on the Report, so it can be compared byte for
// byte (the golden test does).
func (r *Report) WriteMarkdown(w io.Writer) error {
	d := r.build()
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# %s\n\n", mdText(d.title))
	if d.subtitle != "" {
		fmt.Fprintf(bw, "%s\n\n", mdText(d.subtitle))
	}
	for _, s := range d.sections {
		// The anchor makes the answers' links, which name section ids,
		// resolve in the Markdown too.
		fmt.Fprintf(bw, "<a id=\"%s\"></a>\n\n## %s\n\n", s.id, mdText(s.title))
		for _, a := range s.answers {
			fmt.Fprintf(bw, "- **%s** %s", mdText(a.question), a.text)
			if a.link != "" {
				fmt.Fprintf(bw, " ([%s](#%s))", mdText(a.linkText), a.link)
			}
			bw.WriteString("\n")
		}
		if len(s.answers) > 0 {
			bw.WriteString("\n")
		}
		for _, m := range s.meta {
			fmt.Fprintf(bw, "- %s: %s\n", m.k, mdCode(m.v))
		}
		if len(s.meta) > 0 {
			bw.WriteString("\n")
		}
		for _, t := range s.tables {
			if t.caption != "" {
				fmt.Fprintf(bw, "### %s\n\n", mdText(t.caption))
			}
			if len(t.t.Rows) == 0 {
				bw.WriteString("_no rows_\n\n")
				continue
			}
			num := t.t.NumericColumns()
			writeMDRow(bw, t.t.Header)
			seps := make([]string, len(t.t.Header))
			for i := range seps {
				seps[i] = "---"
				if num[i] {
					seps[i] = "---:"
				}
			}
			bw.WriteString("|" + strings.Join(seps, "|") + "|\n")
			for _, row := range t.t.Rows {
				cells := make([]string, len(t.t.Header))
				copy(cells, row)
				writeMDRow(bw, cells)
			}
			bw.WriteString("\n")
		}
		for _, p := range s.pres {
			fmt.Fprintf(bw, "### %s\n\n```\n%s\n```\n\n", mdText(p.title), p.text)
		}
		if len(s.notes) > 0 {
			bw.WriteString("Notes:\n\n")
			for _, n := range s.notes {
				fmt.Fprintf(bw, "- %s\n", mdText(n))
			}
			bw.WriteString("\n")
		}
		if len(s.plots) > 0 {
			bw.WriteString("Plots (in the HTML report):\n\n")
			for _, p := range s.plots {
				fmt.Fprintf(bw, "- %s\n", mdText(p.title))
			}
			bw.WriteString("\n")
		}
		if len(s.details) > 0 {
			fmt.Fprintf(bw, "%d collapsed block(s) (configurations, raw output) are in the HTML report.\n\n", len(s.details))
		}
	}
	return bw.Flush()
}

func writeMDRow(w *bufio.Writer, cells []string) {
	w.WriteString("|")
	for _, c := range cells {
		w.WriteString(" " + mdCell(c) + " |")
	}
	w.WriteString("\n")
}

// mdCell keeps a cell on one line and its pipes from splitting the row.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// mdText keeps free text on one line.
func mdText(s string) string {
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", " ")
}

// mdCode wraps s in a code span long enough not to be closed by backticks
// inside it.
func mdCode(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	fence := "`"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	pad := ""
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		pad = " "
	}
	return fence + pad + s + pad + fence
}
