// Package report renders ipcbench results (bench.Result JSON files and rtt
// sample CSVs) into a self-contained HTML report with plots and a Markdown
// summary. It only renders: it never measures, so a report can be rebuilt
// from saved results on any machine.
//
// The flow is Load/LoadSamples → Report → WriteHTML / WriteMarkdown. A Report
// is plain data; building the document model decodes each result's rows
// into the Row type of the kind its Kind names (calibrate, rtt, latency,
// bufsweep, throughput and its forward leg, conns, peers, trace; anything
// else is shown as a generic table) and shows the kind's own Tables, the
// ones the terminal printed, beside the plots. Plots are drawn with
// gonum.org/v1/plot into inline SVG, so the HTML needs no network and no
// external files; the only script is a small inline one that records
// errors and the drawn size of every plot in data attributes, which the
// headless-browser test reads.
//
// Concurrency: a Report must not be modified while it is being written;
// writing the same Report from several goroutines is safe (rendering only
// reads it). Gonum's plot package keeps no shared mutable state we touch.
package report
