package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ipclab/logagg/internal/report"
)

func init() {
	register(&command{name: "report", summary: "render saved results (--json files, --samples CSVs) as one HTML report and a Markdown summary", run: runReport})
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// parseInterleaved parses flags that may come after positional arguments
// (`report a.json b.json -o r.html`), which flag.Parse alone stops at.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func runReport(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: ipcbench report RESULTS.json|SAMPLES.csv|DIR... [-o report.html] [--md report.md] [--samples FILE.csv]...")
		fs.PrintDefaults()
	}
	out := fs.String("o", "report.html", "write the HTML report to `FILE` (- for stdout, empty for none)")
	md := fs.String("md", "", "also write a Markdown summary to `FILE` (- for stdout)")
	title := fs.String("title", "", "report title (default \"ipcbench report\")")
	var samples stringList
	fs.Var(&samples, "samples", "an rtt samples CSV (`FILE`) to plot; repeatable. *.csv arguments are taken as samples too")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 && len(samples) == 0 {
		fs.Usage()
		return fmt.Errorf("no results given")
	}
	rep := &report.Report{Title: *title, Generated: time.Now()}
	if err := addReportInputs(rep, pos, samples); err != nil {
		return err
	}
	return writeReport(rep, *out, *md)
}

// addReportInputs loads result files, sample CSVs and directories holding
// them (a directory's *.json and *.csv, in name order).
func addReportInputs(rep *report.Report, paths, samples []string) error {
	var files []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			files = append(files, p)
			continue
		}
		m, _ := filepath.Glob(filepath.Join(p, "*.json"))
		c, _ := filepath.Glob(filepath.Join(p, "*.csv"))
		m = append(m, c...)
		sort.Strings(m)
		if len(m) == 0 {
			return fmt.Errorf("%s: no *.json or *.csv files", p)
		}
		files = append(files, m...)
	}
	for _, f := range files {
		if strings.HasSuffix(f, ".csv") {
			samples = append(samples, f)
			continue
		}
		in, err := report.Load(f)
		if err != nil {
			return err
		}
		rep.Inputs = append(rep.Inputs, in)
	}
	for _, f := range samples {
		s, err := report.LoadSamples(f)
		if err != nil {
			return err
		}
		rep.Samples = append(rep.Samples, s)
	}
	return nil
}

// writeReport writes the HTML (and Markdown) through temporary files so a
// browser never shows half a report.
func writeReport(rep *report.Report, htmlPath, mdPath string) error {
	write := func(path string, f func(*os.File) error) error {
		if path == "" {
			return nil
		}
		if path == "-" {
			return f(os.Stdout)
		}
		tmp, err := os.CreateTemp(filepath.Dir(path), ".report-*")
		if err != nil {
			return err
		}
		defer os.Remove(tmp.Name())
		if err := f(tmp); err != nil {
			tmp.Close()
			return err
		}
		if err := tmp.Chmod(0o644); err != nil {
			tmp.Close()
			return err
		}
		if err := tmp.Close(); err != nil {
			return err
		}
		return os.Rename(tmp.Name(), path)
	}
	if err := write(htmlPath, func(f *os.File) error { return rep.WriteHTML(f) }); err != nil {
		return fmt.Errorf("write %s: %w", htmlPath, err)
	}
	if err := write(mdPath, func(f *os.File) error { return rep.WriteMarkdown(f) }); err != nil {
		return fmt.Errorf("write %s: %w", mdPath, err)
	}
	where := os.Stdout
	if htmlPath == "-" || mdPath == "-" {
		where = os.Stderr
	}
	for _, p := range []string{htmlPath, mdPath} {
		if p != "" && p != "-" {
			abs, _ := filepath.Abs(p)
			fmt.Fprintln(where, "report:", abs)
		}
	}
	return nil
}
