package stream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/stream"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

type want struct {
	msg   string
	flags []string
}

func deps(out pipeline.Submitter, m *metrics.Listener, maxRecord int) transport.Deps {
	o := transport.DefaultOptions()
	o.MaxRecord = maxRecord
	return transport.Deps{Sink: sink.New(out, sink.Options{HardStop: context.Background(), BatchBytes: 256}), Metrics: m, Opts: o}
}

func counter(t *testing.T, cv *prometheus.CounterVec, lv ...string) float64 {
	t.Helper()
	var m dto.Metric
	if err := cv.WithLabelValues(lv...).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestFraming runs the framer (package framing has the full table) through
// Serve with readers that return the stream whole, byte by byte and in
// halves, and checks the records and their counters. Octet counting only
// applies to frames starting with '<', so its frames start with "<x>",
// which is not a PRI: such a payload is kept whole as a raw message.
func TestFraming(t *testing.T) {
	long := strings.Repeat("L", 150_000)
	tests := []struct {
		name      string
		in        string
		octet     bool
		maxRecord int
		want      []want
	}{
		{"lines", "a\nb\n", false, 64, []want{{"a", nil}, {"b", nil}}},
		{"empty lines skipped, partial tail", "a\n\n\nb", false, 64, []want{{"a", nil}, {"b", []string{"partial"}}}},
		{"octet frames back to back", "5 <x>ab3 <y>", true, 64, []want{{"<x>ab", nil}, {"<y>", nil}}},
		{"count zero is framing error", "0 <x>x\nok\n", true, 64, []want{{"0 <x>x", []string{"framing"}}, {"ok", nil}}},
		{"long line split", "0123456789abc\nnext\n", false, 8, []want{{"01234567", []string{"truncated"}}, {"89abc", []string{"continuation"}}, {"next", nil}}},
		{"octet over max split", "12 <x>456789abcnext\n", true, 8, []want{{"<x>45678", []string{"truncated"}}, {"9abc", []string{"continuation"}}, {"next", nil}}},
		{"NUL framing keeps newlines", "a\x00b\nc\x00", false, 64, []want{{"a", nil}, {"b\nc", nil}}},
		{"long line grows the buffer", long + "\nz\n", false, 200_000, []want{{long, nil}, {"z", nil}}},
		{"very long line split", long + "\nz\n", false, 100_000, []want{{long[:100_000], []string{"truncated"}}, {long[100_000:], []string{"continuation"}}, {"z", nil}}},
	}
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"bytewise": iotest.OneByteReader,
		"halves":   iotest.HalfReader,
	}
	for _, tc := range tests {
		for rname, wrap := range readers {
			if rname == "bytewise" && len(tc.in) > 10_000 {
				continue
			}
			t.Run(tc.name+"/"+rname, func(t *testing.T) {
				cap := transporttest.NewCapture()
				m := metrics.New(nil)
				ml := m.ForListener("test")
				meta := &record.Meta{Transport: "test", Listener: "test"}
				meta.Prepare()
				if err := stream.Serve(wrap(strings.NewReader(tc.in)), meta, deps(cap, ml, tc.maxRecord), tc.octet); err != nil {
					t.Fatalf("Serve: %v", err)
				}
				if errs := cap.Errors(); len(errs) > 0 {
					t.Fatalf("malformed batches: %v", errs)
				}
				recs, err := cap.Records()
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) != len(tc.want) {
					t.Fatalf("got %d records, want %d: %q", len(recs), len(tc.want), messages(recs))
				}
				kinds := map[string]int{}
				for i, w := range tc.want {
					if recs[i].Message != w.msg {
						t.Errorf("record %d = %.40q, want %.40q", i, recs[i].Message, w.msg)
					}
					if got := framingFlags(recs[i].Agg.Flags); !slices.Equal(got, w.flags) {
						t.Errorf("record %d framing flags %v, want %v", i, got, w.flags)
					}
					for _, f := range w.flags {
						kinds[f]++
					}
				}
				if got := counter(t, m.RecordsIn, "test"); got != float64(len(tc.want)) {
					t.Errorf("records_in = %v, want %d", got, len(tc.want))
				}
				if got := counter(t, m.BytesIn, "test"); got != float64(len(tc.in)) {
					t.Errorf("bytes_in = %v, want %d", got, len(tc.in))
				}
				for _, k := range []string{metrics.KindTruncated, metrics.KindContinuation, metrics.KindPartial, metrics.KindFraming} {
					if got := counter(t, m.DecodeErrors, "test", k); got != float64(kinds[k]) {
						t.Errorf("decode_errors{%s} = %v, want %d", k, got, kinds[k])
					}
				}
			})
		}
	}
}

// framingFlags keeps the flags a framer sets; the decoders add others
// (e.g. syslog_parse for "<1>ab"), which are not this package's business.
func framingFlags(fl []string) []string {
	var out []string
	for _, f := range fl {
		if f == "truncated" || f == "continuation" || f == "partial" || f == "framing" {
			out = append(out, f)
		}
	}
	return out
}

func messages(recs []transporttest.Rec) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Message)
	}
	return out
}

// TestBatching checks batches are cut at BatchBytes, and that a record is
// submitted before the next read blocks rather than waiting for a full batch.
func TestBatching(t *testing.T) {
	cap := transporttest.NewCapture()
	meta := &record.Meta{Transport: "test", Listener: "test"}
	meta.Prepare()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- stream.Serve(pr, meta, deps(cap, nil, 1024), false) }()

	// One short line, then the writer waits: the line must arrive alone.
	if _, err := pw.Write([]byte("lonely\n")); err != nil {
		t.Fatal(err)
	}
	recs := waitLen(t, cap, 1)
	if recs[0].Message != "lonely" {
		t.Fatalf("got %q", recs[0].Message)
	}
	// Many lines in one write: more than one batch of 256 bytes.
	var b bytes.Buffer
	for range 100 {
		b.WriteString("a line of some length to fill batches\n")
	}
	if _, err := pw.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitLen(t, cap, 101)
	if n := cap.Batches(); n < 5 || n > 100 {
		t.Errorf("%d batches for 101 records of ~100 B JSON with BatchBytes 256", n)
	}
}

func waitLen(t *testing.T, cap *transporttest.Capture, n int) []transporttest.Rec {
	t.Helper()
	testenv.Poll(t, 10*time.Second, fmt.Sprintf("%d records", n), func() (string, bool) {
		got := cap.Len()
		return fmt.Sprintf("%d records", got), got >= n
	})
	recs, err := cap.Records()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestSubmitFailureStops checks that a Submit refused at the hard stop ends
// Serve with that error and counts the lost records.
func TestSubmitFailureStops(t *testing.T) {
	cap := transporttest.NewCapture()
	cap.Block()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m := metrics.New(nil)
	d := deps(cap, m.ForListener("test"), 1024)
	d.Sink = sink.New(cap, sink.Options{HardStop: ctx, BatchBytes: 256})
	meta := &record.Meta{}
	meta.Prepare()
	err := stream.Serve(strings.NewReader("a\nb\nc\n"), meta, d, false)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Serve = %v, want context.Canceled", err)
	}
	if got := counter(t, m.Dropped, "test", metrics.CauseDrainTimeout); got != 3 {
		t.Errorf("dropped{drain_timeout} = %v, want 3", got)
	}
}
