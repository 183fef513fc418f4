package file_test

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/ipclab/logagg/internal/budget"
	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
)

// TestHeldRecordsBounded: records being put together in many files (a
// container's long line in pieces, a multi-line trace) are held within
// the budget for incomplete records that stream connections share: past
// it the largest are written out early, flagged truncated, their rest
// follows flagged continuation, and not a byte is lost or written twice.
// Without the bound, 40 files would hold 40 records of 24 KiB each until
// their timeout (an hour here).
func TestHeldRecordsBounded(t *testing.T) {
	const files, pieces, limit = 40, 24, 128 << 10
	piece := func(f, i int) string { return fmt.Sprintf("f%02d-%02d-%s", f, i, strings.Repeat("x", 1000)) }
	for _, c := range []struct {
		name, query string
		line        func(f, i int) string // line i of file f
		join        string                // between the pieces of one record
	}{
		{"cri", "format=cri&partial_timeout=1h",
			func(f, i int) string { return "2026-11-26T10:00:00.000000001Z stdout P " + piece(f, i) + "\n" }, ""},
		{"multiline", "multiline_start=%5EBEGIN&multiline_timeout=1h&multiline_max_lines=1000",
			func(f, i int) string {
				if i == 0 {
					return "BEGIN " + piece(f, i) + "\n"
				}
				return " " + piece(f, i) + "\n"
			}, "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, state := tempDirs(t)
			want := map[string]string{}
			for f := range files {
				p := filepath.Join(dir, fmt.Sprintf("app%02d.log", f))
				var b, w strings.Builder
				for i := range pieces {
					l := c.line(f, i)
					b.WriteString(l)
					if c.name == "cri" {
						w.WriteString(piece(f, i))
					} else {
						if i > 0 {
							w.WriteString("\n")
						}
						w.WriteString(strings.TrimSuffix(l, "\n"))
					}
				}
				appendFile(t, p, b.String())
				want[p] = w.String()
			}
			partial := transport.NewByteBudget(limit)
			in := startWith(t, "file://"+dir+"/*.log?from=start&"+c.query, state, func(d *transport.Deps) { d.Partial = partial })
			// Written out early while the input runs, not at its timeout.
			testenv.Eventually(t, 20*time.Second, "held records written out for the budget", func() bool {
				return limited(in.m, metrics.LimitPartialFrame) >= files-limit/(pieces<<10)
			})
			// Over the budget at most by the buffer a line is being added
			// to, between its append and the check that follows it.
			if h := partial.Held(); h > limit+32<<10 {
				t.Errorf("held %d bytes with the files read, budget %d", h, limit)
			}
			// The records' ends: every piece of them is written then.
			for p := range want {
				if c.name == "cri" {
					appendFile(t, p, "2026-11-26T10:00:00.000000002Z stdout F end\n")
					want[p] += "end"
				} else {
					appendFile(t, p, "BEGIN next\n") // held until its timeout, an hour
				}
			}
			byFile := func() map[string][]rec {
				got := map[string][]rec{}
				for _, r := range in.records() {
					got[r.Agg.File] = append(got[r.Agg.File], r)
				}
				return got
			}
			joined := func(rs []rec) string {
				var msgs []string
				for _, r := range rs {
					msgs = append(msgs, r.Message)
				}
				return strings.Join(msgs, c.join)
			}
			testenv.Eventually(t, 20*time.Second, "every record ended", func() bool {
				got := byFile()
				for p, w := range want {
					if len(joined(got[p])) < len(w) {
						return false
					}
				}
				return true
			})
			got := byFile()
			forced := 0
			for p, w := range want {
				rs := got[p]
				for i, r := range rs {
					if i > 0 && !r.has("continuation") {
						t.Errorf("%s: piece %d not flagged continuation: %v", p, i, r.Agg.Flags)
					}
					if i < len(rs)-1 || r.has("truncated") {
						forced++
					}
					if i < len(rs)-1 && !r.has("truncated") {
						t.Errorf("%s: piece %d not flagged truncated: %v", p, i, r.Agg.Flags)
					}
				}
				if g := joined(rs); g != w {
					t.Errorf("%s: %d records of %d bytes, want the %d bytes written", p, len(rs), len(g), len(w))
				}
			}
			if n := limited(in.m, metrics.LimitPartialFrame); n != float64(forced) {
				t.Errorf("memory_limited_total{partial_frames} %v, want the %d records written out early", n, forced)
			}
			in.stop()
			if h := partial.Held(); h != 0 {
				t.Errorf("the stopped input still counts %d held bytes", h)
			}
		})
	}
}

// limited is memory_limited_total{kind}.
func limited(m *metrics.Metrics, kind string) float64 {
	var d dto.Metric
	if err := m.MemoryLimited.WithLabelValues(kind).Write(&d); err != nil {
		return -1
	}
	return d.GetCounter().GetValue()
}

// TestFilesTakeTheirShare: each file followed takes its cost of the
// connections' share of the memory budget; files past it are not followed
// (counted at every scan, never read half) until followed files are gone
// and give theirs back, and then they are read from their start.
func TestFilesTakeTheirShare(t *testing.T) {
	dir, state := tempDirs(t)
	for i := range 8 {
		appendFile(t, filepath.Join(dir, fmt.Sprintf("f%d.log", i)), fmt.Sprintf("line of f%d\n", i))
	}
	share := budget.NewGate(5 << 10) // five files at 1 KiB
	in := startWith(t, "file://"+dir+"/*.log?from=start&scan=100ms&rotate_wait=100ms", state,
		func(d *transport.Deps) { d.Conns = share })
	first := in.wait(5)
	testenv.Eventually(t, 10*time.Second, "the files past the share counted", func() bool {
		return limited(in.m, metrics.LimitFiles) >= 3
	})
	if n := in.cap.Len(); n != 5 {
		t.Fatalf("%d records with five files' share, want 5: %s", n, describe(in.records()))
	}
	for _, r := range first[:3] {
		if err := os.Remove(r.Agg.File); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	for _, r := range in.wait(8) {
		got[r.Message] = true
	}
	for i := range 8 {
		if !got[fmt.Sprintf("line of f%d", i)] {
			t.Errorf("no record of f%d: %s", i, describe(in.records()))
		}
	}
	in.stop()
	if h := share.Held(); h != 0 {
		t.Errorf("the stopped input still holds %d bytes of the share", h)
	}
}

// TestHeldRecordsBoundedRandom: random container lines in pieces and
// multi-line records, in several files, both streams, under a small
// budget for incomplete records: whatever was written out early and
// wherever, each file's records (each stream's, for containers) hold
// exactly the bytes written, in order, once.
func TestHeldRecordsBoundedRandom(t *testing.T) {
	forced := 0.0
	defer func() {
		if forced == 0 {
			t.Errorf("no record was written out early: the budgets tested nothing")
		}
	}()
	for seed := range int64(6) {
		for _, kind := range []string{"cri", "multiline"} {
			t.Run(fmt.Sprintf("%s-%d", kind, seed), func(t *testing.T) {
				r := rand.New(rand.NewSource(seed))
				dir, state := tempDirs(t)
				text := func() string {
					b := make([]byte, 1+r.Intn(3000))
					for i := range b {
						b[i] = 'a' + byte(r.Intn(26))
					}
					return string(b)
				}
				want := map[string]string{} // file and stream: the bytes its records must hold
				for f := range 1 + r.Intn(5) {
					p := filepath.Join(dir, fmt.Sprintf("app%d.log", f))
					var b strings.Builder
					lines := map[string][]string{}
					for range 5 + r.Intn(20) {
						switch kind {
						case "cri":
							stream := []string{"stdout", "stderr"}[r.Intn(2)]
							for range r.Intn(6) {
								piece := text()
								b.WriteString("2026-11-26T10:00:00.000000001Z " + stream + " P " + piece + "\n")
								want[p+" "+stream] += piece
							}
							piece := text()
							b.WriteString("2026-11-26T10:00:00.000000001Z " + stream + " F " + piece + "\n")
							want[p+" "+stream] += piece
						default:
							l := "BEGIN " + text()
							b.WriteString(l + "\n")
							lines[p] = append(lines[p], l)
							for range r.Intn(8) {
								l := " " + text()
								b.WriteString(l + "\n")
								lines[p] = append(lines[p], l)
							}
						}
					}
					for k, ls := range lines {
						want[k+" "] = strings.Join(ls, "\n")
					}
					appendFile(t, p, b.String())
				}
				query := "format=cri&partial_timeout=1h"
				if kind == "multiline" {
					query = "multiline_start=%5EBEGIN&multiline_timeout=100ms&multiline_max_lines=1000"
				}
				limit := int64(8<<10 + r.Intn(56<<10))
				partial := transport.NewByteBudget(limit)
				in := startWith(t, "file://"+dir+"/*.log?from=start&"+query, state, func(d *transport.Deps) { d.Partial = partial })
				got := func() map[string]string {
					g := map[string][]string{}
					for _, x := range in.records() {
						g[x.Agg.File+" "+x.Agg.Stream] = append(g[x.Agg.File+" "+x.Agg.Stream], x.Message)
					}
					out := map[string]string{}
					for k, ms := range g {
						sep := ""
						if kind == "multiline" {
							sep = "\n"
						}
						out[k] = strings.Join(ms, sep)
					}
					return out
				}
				if _, ok := testenv.Until(20*time.Second, func() (int, bool) {
					g := got()
					for k, w := range want {
						if len(g[k]) < len(w) {
							return 0, false
						}
					}
					return 0, true
				}); !ok {
					t.Fatalf("not every byte written within 20 s (budget %d)", limit)
				}
				g := got()
				for k, w := range want {
					if g[k] != w {
						t.Errorf("%s: %d bytes in its records, want the %d written (budget %d)", k, len(g[k]), len(w), limit)
					}
				}
				if len(g) != len(want) {
					t.Errorf("records of %d files and streams, want %d", len(g), len(want))
				}
				forced += limited(in.m, metrics.LimitPartialFrame)
				t.Logf("%v records written out early (budget %d)", limited(in.m, metrics.LimitPartialFrame), limit)
				in.stop()
				if h := partial.Held(); h != 0 {
					t.Errorf("the stopped input still counts %d held bytes", h)
				}
			})
		}
	}
}
