package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/bench/harness"
	"github.com/ipclab/logagg/internal/testenv"
)

// aggProc is a real aggregator process started by a test, through the
// lab's harness: it is ready, and its addresses known, when it says so
// over sd_notify (docs/service.md).
type aggProc struct {
	t      *testing.T
	proc   *harness.Proc
	output string
	// metrics is the metrics URL (the harness's, or one a test scraped
	// from a forward command's log).
	metrics string
	stderr  syncBuffer // the whole log, for assertions on it
}

// startAgg runs the aggregator with args plus --output and --metrics, and
// waits until it has bound everything.
func startAgg(t *testing.T, dir string, args ...string) *aggProc {
	t.Helper()
	p := &aggProc{t: t, output: filepath.Join(dir, "out.jsonl")}
	full := append([]string{"--output", p.output, "--metrics", "127.0.0.1:0", "--fsync", "never"}, args...)
	proc, err := harness.Aggregator{Bin: testenv.Binary(t, "aggregator"), Args: full, Stderr: &p.stderr,
		StartTimeout: 20 * time.Second}.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.proc, p.metrics = proc, proc.Metrics()
	t.Cleanup(proc.Kill)
	return p
}

func (p *aggProc) log() string { return p.stderr.String() }

// pid is the aggregator's process id.
func (p *aggProc) pid() int { return p.proc.Pid() }

// signal sends sig to the aggregator.
func (p *aggProc) signal(sig syscall.Signal) { _ = syscall.Kill(p.proc.Pid(), sig) }

// exited is closed once the aggregator has exited.
func (p *aggProc) exited() <-chan struct{} { return p.proc.Done() }

// url returns the bound URL with the given scheme.
func (p *aggProc) url(scheme string) string {
	for _, u := range p.proc.Listen() {
		if strings.HasPrefix(u, scheme+"://") {
			return u
		}
	}
	p.t.Fatalf("no %s listener in %v", scheme, p.proc.Listen())
	return ""
}

// stop sends sig and waits for exit, failing unless it exits 0.
func (p *aggProc) stop(sig syscall.Signal) {
	p.t.Helper()
	p.signal(sig)
	select {
	case <-p.exited():
	case <-time.After(30 * time.Second):
		p.t.Fatalf("aggregator did not exit after %v\n%s", sig, p.log())
	}
	if _, err := p.proc.Stop(); err != nil {
		p.t.Fatalf("aggregator exit: %v\n%s", err, p.log())
	}
}

// metric sums the samples of name whose label set contains every labels
// fragment (e.g. `cause="write_error"`).
func (p *aggProc) metric(name string, labels ...string) float64 {
	p.t.Helper()
	resp, err := http.Get(p.metrics)
	if err != nil {
		p.t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sum += v
	}
	return sum
}

// waitMetric polls until metric >= want or the deadline passes.
func (p *aggProc) waitMetric(want float64, name string, labels ...string) float64 {
	p.t.Helper()
	v, _ := testenv.Until(15*time.Second, func() (float64, bool) {
		v := p.metric(name, labels...)
		return v, v >= want
	})
	return v
}

// readRecords parses every line of the output file (and rotated segments)
// as a JSON object; any invalid line fails the test.
func readRecords(t *testing.T, output string) []map[string]any {
	t.Helper()
	files, _ := filepath.Glob(output + ".*")
	files = append(files, output)
	var out []map[string]any
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range bytes.Split(b, []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatalf("%s line %d is not valid JSON: %v\n%q", f, i+1, err, line)
			}
			out = append(out, m)
		}
	}
	return out
}

func agg(m map[string]any) map[string]any {
	a, _ := m["agg"].(map[string]any)
	return a
}

func hasFlag(m map[string]any, flag string) bool {
	fl, _ := agg(m)["flags"].([]any)
	for _, f := range fl {
		if f == flag {
			return true
		}
	}
	return false
}

func describe(recs []map[string]any) string {
	var b strings.Builder
	for i, r := range recs {
		if i > 20 {
			fmt.Fprintf(&b, "... %d more\n", len(recs)-i)
			break
		}
		j, _ := json.Marshal(r)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}
